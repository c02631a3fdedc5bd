// The environment templates: what each is for, its image (operator flags, public defaults in
// DECISIONS.md) and the resources each environment of it gets.
import { TEMPLATE_IDS, type Template, type TemplateId } from '@svc/contract';

const DESCRIPTIONS: Record<TemplateId, string> = {
  default: 'Ubuntu 24.04 base: a shell and the usual command-line tools',
  node: 'Node.js 22 with npm and git (Debian bookworm)',
  python: 'Python 3.12 with pip and git (Debian bookworm)',
  go: 'Go 1.23 with git (Debian bookworm)',
};

/** Every template gets the same share: a workspace for one person or agent at a time. */
export const ENVIRONMENT_RESOURCES = { memory_mb: 1024, cpu_cores: 1, pids: 1024 } as const;

export function isTemplateId(id: string): id is TemplateId {
  return (TEMPLATE_IDS as readonly string[]).includes(id);
}

export function templateList(images: Record<TemplateId, string>): Template[] {
  return TEMPLATE_IDS.map((id) => ({ id, description: DESCRIPTIONS[id], image: images[id], resources: { ...ENVIRONMENT_RESOURCES } }));
}

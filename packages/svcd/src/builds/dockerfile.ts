// What a tenant's Dockerfile may ask of the engine (issue 17, item 3), checked before the build
// starts, with the line named. Two steps of the classic builder run outside the tenant's
// sandbox and egress rules: `ADD <url>` is fetched by the engine itself from the host's network,
// and `FROM` / `COPY --from=<image>` make the engine fetch an image. So remote ADD is refused (a
// RUN step can fetch instead, under the tenant's rules), and every image named must be one the
// tenant could run (services/images.ts: registry rule, no image IDs, no other tenant's builds).
// Variables in image names and ADD arguments are refused (the engine would expand them after
// this check), and so is ONBUILD (a later stage FROM this one would run its trigger unchecked).
// The runner reads the Dockerfile only as a regular file (a symlink would show this check one
// file and the engine another).
//
// Parsed with dockerfile-ast (the parser of VS Code's Docker support) rather than regular
// expressions: line continuations, the escape directive, JSON forms and flags are its business.
import { DockerfileParser, From, ModifiableInstruction } from 'dockerfile-ast';
import { ValidationError } from '../errors.js';
import { tenantImageRefusal, type ImageOwnership } from '../services/images.js';

/** A URL scheme (http://, https://, git://, ...) or scp-like git remote (git@host:repo). */
const REMOTE_SOURCE = /[a-z][a-z0-9+.-]*:\/\/|(^|[\s"'[,])git@/i;

/**
 * Throws ValidationError naming the first line that breaks a rule. Returns the images the build
 * would fetch (FROM and COPY --from, not stages or scratch), for the runner's base-image check.
 */
export function checkDockerfile(text: string, owner: ImageOwnership): string[] {
  const dockerfile = DockerfileParser.parse(text);
  const stages = new Set<string>();
  const images: string[] = [];
  for (const instruction of dockerfile.getInstructions()) {
    const at = `Dockerfile line ${instruction.getRange().start.line + 1}`;
    const refuse = (why: string): never => {
      throw new ValidationError(`${at}: ${why}`);
    };
    const keyword = instruction.getKeyword();
    if (keyword === 'FROM' && instruction instanceof From) {
      const image = fromImage(instruction) ?? refuse('FROM names no image');
      const stage = instruction.getBuildStage();
      if (image.toLowerCase() !== 'scratch' && !stages.has(image.toLowerCase())) images.push(checkImage(image, owner, refuse));
      if (stage) stages.add(stage.toLowerCase());
    } else if (keyword === 'ADD') {
      // Each argument as the engine joins it (continuations and the escape directive undone),
      // and the raw text too; a variable could hold a URL the engine expands after this check.
      const args = instruction.getArguments().map((arg) => arg.getValue());
      if ([...args, instruction.getRawArgumentsContent() ?? ''].some((text) => REMOTE_SOURCE.test(text))) {
        refuse('ADD from a URL is not allowed (the engine would fetch it from the host network); fetch it in a RUN step or COPY it from the repository');
      }
      if (args.some((text) => text.includes('$'))) refuse('variables are not allowed in ADD (a variable could name a URL); use COPY, or spell the path out');
    } else if (keyword === 'ONBUILD') {
      // A later stage built FROM this one would run the trigger, unchecked.
      refuse('ONBUILD is not allowed');
    }
    if ((keyword === 'ADD' || keyword === 'COPY') && instruction instanceof ModifiableInstruction) {
      const image = checkFromFlag(instruction, stages, owner, refuse);
      if (image !== null) images.push(image);
    }
  }
  return [...new Set(images)];
}

function fromImage(instruction: From): string | null {
  // The first argument that is not a flag (--platform=...).
  return instruction.getArguments().map((a) => a.getValue()).find((v) => !v.startsWith('--')) ?? null;
}

/** COPY --from=<stage|index|image>: an image is fetched by the engine like FROM. */
function checkFromFlag(instruction: ModifiableInstruction, stages: Set<string>, owner: ImageOwnership, refuse: (why: string) => never): string | null {
  const from = instruction.getFlags().find((f) => f.getName().toLowerCase() === 'from')?.getValue();
  if (from === undefined) return null;
  if (from === null || from === '') return refuse('--from names nothing');
  if (/^\d+$/.test(from) || stages.has(from.toLowerCase())) return null;
  return checkImage(from, owner, refuse);
}

function checkImage(image: string, owner: ImageOwnership, refuse: (why: string) => never): string {
  if (image.includes('$')) refuse(`variables are not allowed in image names (${image})`);
  const refusal = tenantImageRefusal(image, owner);
  if (refusal !== null) refuse(refusal);
  return image;
}

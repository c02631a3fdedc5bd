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
import { DockerfileParser, From, ModifiableInstruction, type Instruction } from 'dockerfile-ast';
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
      if (fromImage(instruction) === null) refuse('FROM names no image');
      const named = imageNamed(instruction, stages);
      if (named) images.push(checkImage(named.image, owner, refuse));
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
      const from = fromFlag(instruction)?.getValue();
      if (from === null || from === '') refuse('--from names nothing');
      const named = imageNamed(instruction, stages);
      if (named) images.push(checkImage(named.image, owner, refuse));
    }
  }
  return [...new Set(images)];
}

/**
 * The Dockerfile with every image its FROM and COPY --from name (those checkDockerfile returned)
 * replaced by the ID of the local copy the runner checked (`ids`: image -> ID), so that the
 * engine builds from exactly that copy. By name it would read the tag again as it reaches the
 * step, and a pull of the same name meanwhile (any deploy of it) can have moved the tag to
 * another copy, one with ONBUILD triggers the check never saw.
 */
export function pinImages(text: string, ids: ReadonlyMap<string, string>): string {
  const stages = new Set<string>();
  const edits: { start: number; end: number; id: string }[] = [];
  // Where each line starts in the text, for the parser's line and character positions.
  const lineStarts = [0];
  for (let i = text.indexOf('\n'); i !== -1; i = text.indexOf('\n', i + 1)) lineStarts.push(i + 1);
  const offset = (p: Position) => (lineStarts[p.line] ?? text.length) + p.character;
  for (const instruction of DockerfileParser.parse(text).getInstructions()) {
    const named = imageNamed(instruction, stages);
    const id = named ? ids.get(named.image) : undefined;
    if (named && id !== undefined) edits.push({ start: offset(named.range.start), end: offset(named.range.end), id });
  }
  let pinned = text;
  for (const e of edits.sort((a, b) => b.start - a.start)) pinned = pinned.slice(0, e.start) + e.id + pinned.slice(e.end);
  return pinned;
}

interface Position {
  line: number;
  character: number;
}

/**
 * The image an instruction makes the engine fetch, and where it is written: FROM's (not a stage
 * named before, nor scratch) or COPY/ADD --from's (not a stage, nor a stage's index). A FROM's
 * own stage name is added to `stages` (the instructions in order, as the engine reads them).
 */
function imageNamed(instruction: Instruction, stages: Set<string>): { image: string; range: { start: Position; end: Position } } | null {
  if (instruction instanceof From && instruction.getKeyword() === 'FROM') {
    const arg = instruction.getArguments().find((a) => !a.getValue().startsWith('--'));
    const stage = instruction.getBuildStage();
    const image = arg?.getValue();
    const named = arg && image && image.toLowerCase() !== 'scratch' && !stages.has(image.toLowerCase()) ? { image, range: arg.getRange() } : null;
    if (stage) stages.add(stage.toLowerCase());
    return named;
  }
  const keyword = instruction.getKeyword();
  if ((keyword === 'ADD' || keyword === 'COPY') && instruction instanceof ModifiableInstruction) {
    const flag = fromFlag(instruction);
    const image = flag?.getValue();
    const range = flag?.getValueRange();
    if (!image || !range || /^\d+$/.test(image) || stages.has(image.toLowerCase())) return null;
    return { image, range };
  }
  return null;
}

function fromImage(instruction: From): string | null {
  // The first argument that is not a flag (--platform=...).
  return instruction.getArguments().map((a) => a.getValue()).find((v) => !v.startsWith('--')) ?? null;
}

/** COPY --from=<stage|index|image>: an image is fetched by the engine like FROM. */
function fromFlag(instruction: ModifiableInstruction) {
  return instruction.getFlags().find((f) => f.getName().toLowerCase() === 'from');
}

function checkImage(image: string, owner: ImageOwnership, refuse: (why: string) => never): string {
  if (image.includes('$')) refuse(`variables are not allowed in image names (${image})`);
  const refusal = tenantImageRefusal(image, owner);
  if (refusal !== null) refuse(refusal);
  return image;
}

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
import { DockerfileParser, From, ModifiableInstruction, type Argument, type Instruction } from 'dockerfile-ast';
import { ValidationError } from '../errors.js';
import { tenantImageRefusal, type ImageOwnership } from '../services/images.js';

/**
 * Characters on which Docker's parser and dockerfile-ast read a Dockerfile differently (found on
 * review): a carriage return not before a line feed (a line break to dockerfile-ast, whitespace to
 * Docker), vertical tab, form feed and the other control characters, and Unicode whitespace and
 * the byte order mark (Docker strips them at the start of a line, dockerfile-ast does not). With
 * any of them an instruction one parser sees could be text to the other: refused.
 */
const AMBIGUOUS_CHARACTER = /\r(?!\n)|[\u0000-\u0008\u000B\u000C\u000E-\u001F\u007F\u0085\u00A0\u1680\u180E\u2000-\u200B\u2028\u2029\u202F\u205F\u3000\uFEFF\uFFFD]/;

/** A parser directive as Docker's parser reads one (moby/buildkit, frontend/dockerfile/parser). */
const DOCKER_DIRECTIVE = /^#\s*([a-zA-Z][a-zA-Z0-9]*)\s*=\s*(.+?)\s*$/;
const DOCKER_DIRECTIVES = new Set(['escape', 'syntax', 'check']);

/** The instructions Docker's builder knows (any other fails the build). */
const DOCKER_INSTRUCTIONS = new Set(['ADD', 'ARG', 'CMD', 'COPY', 'ENTRYPOINT', 'ENV', 'EXPOSE', 'FROM', 'HEALTHCHECK', 'LABEL', 'MAINTAINER', 'ONBUILD', 'RUN', 'SHELL', 'STOPSIGNAL', 'USER', 'VOLUME', 'WORKDIR']);

/** A URL scheme (http://, https://, git://, ...) or scp-like git remote (git@host:repo). */
const REMOTE_SOURCE = /[a-z][a-z0-9+.-]*:\/\/|(^|[\s"'[,])git@/i;
const REMOTE_ADD_REFUSAL = 'ADD from a URL is not allowed (the engine would fetch it from the host network); fetch it in a RUN step or COPY it from the repository';

/**
 * Throws ValidationError naming the first line that breaks a rule. Returns the images the build
 * would fetch (FROM and COPY --from, not stages or scratch), for the runner's base-image check.
 */
export function checkDockerfile(text: string, owner: ImageOwnership): string[] {
  const ambiguous = AMBIGUOUS_CHARACTER.exec(text);
  if (ambiguous) {
    const line = text.slice(0, ambiguous.index).split('\n').length;
    throw new ValidationError(`Dockerfile line ${line}: character U+${ambiguous[0].charCodeAt(0).toString(16).toUpperCase().padStart(4, '0')} is not allowed (Docker and svc's check would read the line differently)`);
  }
  const dockerfile = DockerfileParser.parse(text);
  // Which lines are directives and which escape character continues lines decide what is an
  // instruction: both parsers must agree on both.
  const directives = dockerDirectives(text);
  const escape = directives.find((d) => d.name === 'escape')?.value ?? '\\';
  const theirs = dockerfile.getDirectives().map((d) => d.getName().toLowerCase());
  if (escape !== dockerfile.getEscapeCharacter() || theirs.join(' ') !== directives.map((d) => d.name).join(' ')) {
    throw new ValidationError("Dockerfile: parser directives must be the first lines, `# escape=` and `# syntax=` only, one per line (Docker and svc's check would read these differently)");
  }
  checkLines(text, escape);
  const stages = new Stages();
  const images: string[] = [];
  const offset = offsets(text);
  for (const instruction of dockerfile.getInstructions()) {
    const at = `Dockerfile line ${instruction.getRange().start.line + 1}`;
    const refuse = (why: string): never => {
      throw new ValidationError(`${at}: ${why}`);
    };
    const keyword = instruction.getKeyword();
    // A keyword Docker would not know fails its build anyway; to the check it can be the half of
    // one Docker joins across lines (found on review: `AD\`, a blank line, a comment, `D URL`).
    if (!DOCKER_INSTRUCTIONS.has(keyword)) refuse(`unknown instruction ${keyword}`);
    if (keyword === 'FROM' && instruction instanceof From) {
      if (!fromImage(instruction)) refuse('FROM names no image');
      const named = imageNamed(instruction, stages);
      if (named) images.push(checkImage(named.image, owner, refuse));
    }
    if (keyword === 'RUN' || keyword === 'ADD' || keyword === 'COPY') {
      const raw = instruction.getRawArgumentsContent() ?? '';
      // Heredocs: Docker takes the quotes out of a delimiter, dockerfile-ast does not, so the two
      // disagree on where the body ends (and what follows it).
      if (raw.includes('<<')) refuse('heredocs (<<) are not allowed: write the file in the repository and COPY it');
      // JSON form: Docker decodes escapes (\u003a is ':'), which the checks here would not see.
      if (keyword !== 'RUN' && raw.trimStart().startsWith('[') && raw.includes('\\')) refuse('backslashes are not allowed in the JSON form of ADD and COPY');
    }
    if (keyword === 'ADD' || keyword === 'COPY') {
      // The instruction's words as Docker tells flags apart: only the leading words that begin
      // with `--`, their quotes taken out. dockerfile-ast counts any word with `--` in it as a
      // flag and keeps quotes (found on review: a URL with `--` in its host dropped from the
      // arguments; `--chown="a b" --from=IMAGE` hiding the --from). So the two agree only
      // without quotes or escape characters in flags, and without `--` in a later word.
      const { start, end } = instruction.getRange();
      const whole = text.slice(offset(start), offset(end)).replace(new RegExp(`${escapeRegExp(escape)}[ \t]*\r?\n`, 'g'), ' ');
      const words = whole.trim().split(/\s+/).slice(1);
      const flags = words.findIndex((w) => !w.startsWith('--'));
      const leading = flags === -1 ? words : words.slice(0, flags);
      if (leading.some((w) => /["'`\\]/.test(w) || w.includes(escape))) refuse('quotes and escape characters are not allowed in flags');
      if ((flags === -1 ? [] : words.slice(flags)).some((w) => w.includes('--'))) refuse('`--` is allowed only in the flags before the sources (svc\'s check and Docker would tell flags apart differently)');
      // Docker takes quotes and escapes out of each source (`"http"://` is http://): the URL
      // rule reads the whole instruction without them.
      if (keyword === 'ADD' && REMOTE_SOURCE.test(whole.replace(/["'`\\]/g, ''))) refuse(REMOTE_ADD_REFUSAL);
    }
    if (keyword === 'ADD') {
      // Each argument as the engine joins it (continuations and the escape directive undone),
      // and the raw text too; a variable could hold a URL the engine expands after this check.
      const args = instruction.getArguments().map((arg) => arg.getValue());
      if ([...args, instruction.getRawArgumentsContent() ?? ''].some((text) => REMOTE_SOURCE.test(text))) refuse(REMOTE_ADD_REFUSAL);
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
  const stages = new Stages();
  const edits: { start: number; end: number; id: string }[] = [];
  const offset = offsets(text);
  for (const instruction of DockerfileParser.parse(text).getInstructions()) {
    const named = imageNamed(instruction, stages);
    const id = named ? ids.get(named.image) : undefined;
    if (named && id !== undefined) edits.push({ start: offset(named.range.start), end: offset(named.range.end), id });
  }
  let pinned = text;
  for (const e of edits.sort((a, b) => b.start - a.start)) pinned = pinned.slice(0, e.start) + e.id + pinned.slice(e.end);
  // Read again: every image the result names must be a checked copy's ID (an edit misplaced
  // would leave a name for the engine to look up).
  const pinnedIds = new Set(ids.values());
  const again = new Stages();
  for (const instruction of DockerfileParser.parse(pinned).getInstructions()) {
    const named = imageNamed(instruction, again);
    if (named && !pinnedIds.has(named.image)) throw new Error(`the build could not be pinned to the checked copy of ${named.image}`);
  }
  return pinned;
}

/**
 * The parser directives Docker's parser reads: the first lines of the form DOCKER_DIRECTIVE with
 * a name it knows, up to the first other line.
 */
function dockerDirectives(text: string): { name: string; value: string }[] {
  const found: { name: string; value: string }[] = [];
  for (const line of text.split('\n')) {
    const directive = DOCKER_DIRECTIVE.exec(line.replace(/\r$/, '').trimStart());
    const name = directive?.[1]?.toLowerCase();
    if (!directive || name === undefined || !DOCKER_DIRECTIVES.has(name)) break;
    found.push({ name, value: directive[2] ?? '' });
  }
  return found;
}

/**
 * Line by line, what the two parsers would join or split differently (found on review):
 * - non-ASCII outside comments: Docker splits flags on bytes, some of which (0x85, 0xA0) are
 *   whitespace to it inside a UTF-8 character;
 * - a line ending in the escape character twice: not a continuation to Docker, one to
 *   dockerfile-ast;
 * - a comment line within a continuation: Docker drops it and joins what is around it (a keyword
 *   too), dockerfile-ast ends the instruction there.
 */
function checkLines(text: string, escape: string): void {
  const lines = text.split('\n').map((l) => l.replace(/\r$/, ''));
  const doubled = new RegExp(`${escapeRegExp(escape)}{2}[ \t]*$`);
  const continues = new RegExp(`${escapeRegExp(escape)}[ \t]*$`);
  let continued = false;
  lines.forEach((line, i) => {
    const refuse = (why: string): never => {
      throw new ValidationError(`Dockerfile line ${i + 1}: ${why}`);
    };
    // A blank line within a continuation continues it for both (Docker warns): it changes nothing.
    if (line.trim() === '') return;
    const comment = line.trimStart().startsWith('#');
    if (comment && continued) refuse('a comment within a continued instruction is not allowed (Docker and svc\'s check would join the lines differently)');
    if (comment) return;
    if (/[^\u0000-\u007F]/.test(line)) refuse('non-ASCII characters are allowed only in comments');
    if (doubled.test(line)) refuse(`a line may not end in ${escape}${escape} (Docker and svc's check would read the next line differently)`);
    continued = continues.test(line);
  });
}

function escapeRegExp(text: string): string {
  return text.replace(/[\\^$.*+?()[\]{}|]/g, '\\$&');
}

/**
 * The stage names an instruction can refer to. Docker's builder knows a stage's name once the
 * stage has ended: inside stage `foo`, `COPY --from=foo` names the image foo.
 */
class Stages {
  private readonly ended = new Set<string>();
  private current: string | null = null;

  /** A FROM begins a stage: the one before it has ended. */
  begin(name: string | null): void {
    if (this.current !== null) this.ended.add(this.current);
    this.current = name?.toLowerCase() ?? null;
  }

  has(name: string): boolean {
    return this.ended.has(name.toLowerCase());
  }
}

interface Position {
  line: number;
  character: number;
}

/**
 * Where the parser's positions (line, character) are in the text: lines end at `\n` (a lone
 * `\r`, which the parser would count as a line end too, is refused by checkDockerfile).
 */
function offsets(text: string): (p: Position) => number {
  const lineStarts = [0];
  for (let i = text.indexOf('\n'); i !== -1; i = text.indexOf('\n', i + 1)) lineStarts.push(i + 1);
  return (p) => (lineStarts[p.line] ?? text.length) + p.character;
}

/**
 * The image an instruction makes the engine fetch, and where it is written: FROM's (not a stage
 * ended before, nor scratch) or COPY/ADD --from's (not such a stage, nor a stage's index). A FROM
 * begins a stage in `stages` (the instructions in order, as the engine reads them).
 */
function imageNamed(instruction: Instruction, stages: Stages): { image: string; range: { start: Position; end: Position } } | null {
  if (instruction instanceof From && instruction.getKeyword() === 'FROM') {
    stages.begin(instruction.getBuildStage());
    const arg = fromImage(instruction);
    const image = arg?.getValue();
    return arg && image && image.toLowerCase() !== 'scratch' && !stages.has(image) ? { image, range: arg.getRange() } : null;
  }
  const keyword = instruction.getKeyword();
  if ((keyword === 'ADD' || keyword === 'COPY') && instruction instanceof ModifiableInstruction) {
    const flag = fromFlag(instruction);
    const image = flag?.getValue();
    const range = flag?.getValueRange();
    if (!image || !range || /^\d+$/.test(image) || stages.has(image)) return null;
    return { image, range };
  }
  return null;
}

/** FROM's image: its first argument that is not a flag (--platform=...). */
function fromImage(instruction: From): Argument | undefined {
  return instruction.getArguments().find((a) => !a.getValue().startsWith('--'));
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

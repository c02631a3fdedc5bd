// The image port: building, pushing, pulling and removing images. A port of its own beside the
// workload driver (driver.ts): a Swarm installation builds on one engine and pushes to the
// cluster's registry, whatever runs the workloads. Types only.

/** An image build from a context directory (Dockerfile at its root). */
export interface ImageBuildSpec {
  contextDir: string;
  tag: string;
  /** Whose build: its RUN steps use the tenant's network. Null: an operator image, no network. */
  tenantId: string | null;
  /** The build's store id. */
  resourceId: string;
  /** For the build's RUN steps (pids: a process limit inside each step). */
  limits: { memoryMb: number; cpus: number; pids: number };
  /** Pull every image FROM names, even when the engine has one of that name (tenant builds). */
  pullBaseImages: boolean;
  signal: AbortSignal;
  /** The engine's output, line by line, as it comes. */
  onOutput(line: string): void;
}

export interface ImageBuilder {
  /**
   * The runtime the builder's RUN steps run under: the engine's default (the classic builder
   * names none). Kept between builds while the engine reports no change (kept-answer.ts).
   * Throws RuntimeUnavailableError when no engine answers.
   */
  stepRuntime(): Promise<string>;
  hasImage(image: string): Promise<boolean>;
  /**
   * What a workload runs the local image of that name by, pinned to its content (null when there
   * is none): its ID on one engine; on a swarm, whose other nodes cannot pull an ID, the
   * registry digest its pull or push left (repository@sha256:...).
   */
  imageId(image: string): Promise<string | null>;
  /**
   * A local image's ID and the ONBUILD triggers it carries (empty when none), read at once: a
   * build is pinned to the copy whose triggers were checked (builds/dockerfile.ts, pinImages).
   */
  baseImage(image: string): Promise<{ id: string; triggers: string[] }>;
  /** Pulls an image; rejects with the registry's message. */
  pullImage(image: string, signal?: AbortSignal): Promise<void>;
  /**
   * Builds an image; rejects with the engine's error (a failed step, a bad Dockerfile) or when
   * the signal aborts (which stops the build in the engine).
   */
  buildImage(spec: ImageBuildSpec): Promise<void>;
  /** Pushes a tagged image to the registry its name starts with; rejects with the registry's error. */
  pushImage(image: string, signal: AbortSignal, onOutput: (line: string) => void): Promise<void>;
  /** Removes one image tag; a missing one, or one a container still uses, is left as it is. */
  removeImage(reference: string): Promise<void>;
  /** Removes every tag of an image repository (e.g. all builds of a service). */
  removeRepository(repository: string): Promise<void>;
}

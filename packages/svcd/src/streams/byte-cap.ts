// A stream piece that passes bytes on until a cap, then fails with the error its user names.
// Uploads and archives are bounded as the bytes flow, never by trusting a declared size: the
// environments' file uploads, an uploaded source archive as sent, and what it unpacks to.
import { Transform, type TransformCallback } from 'node:stream';

export class ByteCap extends Transform {
  /** What has passed so far. */
  bytes = 0;
  /** The cap was passed (the stream failed with `tooLarge()`'s error). */
  exceeded = false;

  constructor(
    private readonly max: number,
    private readonly tooLarge: () => Error,
  ) {
    super();
  }

  override _transform(chunk: Buffer, _encoding: BufferEncoding, done: TransformCallback): void {
    this.bytes += chunk.length;
    if (this.bytes > this.max) {
      this.exceeded = true;
      done(this.tooLarge());
      return;
    }
    done(null, chunk);
  }
}

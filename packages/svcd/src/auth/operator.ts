import { ForbiddenError, UnauthorizedError } from '../errors.js';
import { tokenInList } from './key-format.js';

export type OperatorCredential = 'admin' | 'bootstrap';

/**
 * Bootstrap and admin tokens (spec 5.6, 5.7). Each is a list, so tokens can be rotated: any
 * listed token is accepted.
 */
export class OperatorTokens {
  constructor(
    private readonly bootstrapTokens: readonly string[],
    private readonly adminTokens: readonly string[],
  ) {}

  get bootstrapConfigured(): boolean {
    return this.bootstrapTokens.length > 0;
  }

  isValidBootstrap(token: string): boolean {
    return this.bootstrapTokens.length > 0 && tokenInList(token, this.bootstrapTokens);
  }

  /**
   * Authorizes an operator route. With an admin token configured, only it works (in
   * X-Admin-Token or X-Bootstrap-Token), and a valid bootstrap token is refused with 403. Without
   * one, a bootstrap token is accepted (deprecated; the caller logs it).
   */
  authorize(headers: { admin?: string; bootstrap?: string }): OperatorCredential {
    const presented = [headers.admin, headers.bootstrap].filter((t): t is string => typeof t === 'string' && t !== '');
    if (presented.length === 0) throw new UnauthorizedError('operator token required (X-Admin-Token)');
    if (this.adminTokens.length > 0) {
      if (presented.some((t) => tokenInList(t, this.adminTokens))) return 'admin';
      if (presented.some((t) => this.isValidBootstrap(t))) {
        throw new ForbiddenError('a bootstrap token cannot be used on operator routes when an admin token is configured');
      }
      throw new UnauthorizedError('invalid operator token');
    }
    if (presented.some((t) => this.isValidBootstrap(t))) return 'bootstrap';
    throw new UnauthorizedError('invalid operator token');
  }
}

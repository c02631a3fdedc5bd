// The two fields of a build from git (a new service built from git, or a build of an existing
// one) and the build request they make.
import { useState } from 'react';
import type { CreateBuildRequest } from '@svc/client';

export function useGitSource(idPrefix: string): { fields: React.ReactNode; request: () => CreateBuildRequest } {
  const [url, setUrl] = useState('');
  const [ref, setRef] = useState('');
  const fields = (
    <>
      <div>
        <label htmlFor={`${idPrefix}-git-url`}>Git URL</label>
        <input id={`${idPrefix}-git-url`} type="url" required value={url} onChange={(e) => setUrl(e.target.value)} placeholder="https://…" />
      </div>
      <div>
        <label htmlFor={`${idPrefix}-git-ref`}>Branch, tag or commit</label>
        <input id={`${idPrefix}-git-ref`} value={ref} onChange={(e) => setRef(e.target.value)} placeholder="default branch" />
      </div>
    </>
  );
  const request = (): CreateBuildRequest => ({ source_type: 'git', source_url: url.trim(), source_ref: ref.trim() === '' ? undefined : ref.trim() });
  return { fields, request };
}

// Services: the list (paged) and the two ways to create one, from an image or built from git.
import { useMutation, useQuery, useQueryClient } from '@tanstack/react-query';
import { useState, type SyntheticEvent } from 'react';
import type { Service } from '@svc/client';
import { client } from '../api.js';
import { useGitSource } from '../git-source.js';
import { href, navigate } from '../router.js';
import { Ago, ErrorNote, Pager, Section, Status, TableWrap } from '../ui.js';

const PAGE = 20;

export function Services() {
  const [offset, setOffset] = useState(0);
  const list = useQuery({ queryKey: ['services', offset, PAGE], queryFn: () => client.listServices({ limit: PAGE, offset }), refetchInterval: 5_000 });
  return (
    <>
      <h1>Services</h1>
      <CreateService />
      <Section title="Your services">
        <ErrorNote error={list.error} />
        {list.data?.length === 0 && offset === 0 ? <p>No services yet: create one above.</p> : null}
        {list.data && list.data.length > 0 ? (
          <TableWrap label="Services table">
            <table>
              <thead>
                <tr>
                  <th scope="col">Name</th>
                  <th scope="col">Status</th>
                  <th scope="col">URL</th>
                  <th scope="col">Created</th>
                </tr>
              </thead>
              <tbody>
                {list.data.map((s) => (
                  <tr key={s.id}>
                    <td>
                      <a href={href({ page: 'service', id: s.id })}>{s.name}</a>
                    </td>
                    <td>
                      <Status value={s.status} />
                    </td>
                    <td>{s.url ? <a href={s.url}>{s.url}</a> : '—'}</td>
                    <td>
                      <Ago unix={s.created_at} />
                    </td>
                  </tr>
                ))}
              </tbody>
            </table>
          </TableWrap>
        ) : null}
        <Pager offset={offset} limit={PAGE} count={list.data?.length ?? 0} onChange={setOffset} />
      </Section>
    </>
  );
}

function CreateService() {
  const queryClient = useQueryClient();
  const [source, setSource] = useState<'image' | 'git'>('image');
  const [name, setName] = useState('');
  const [image, setImage] = useState('');
  const [port, setPort] = useState('');
  const git = useGitSource('svc');
  const [halfMade, setHalfMade] = useState<Service | null>(null);
  const create = useMutation({
    mutationFn: async () => {
      const portNumber = port.trim() === '' ? undefined : Number(port);
      if (source === 'image') return client.createService({ name: name.trim(), image: image.trim(), port: portNumber });
      const service = await client.createService({ name: name.trim(), port: portNumber, await_build: true });
      // The service exists now whatever the build says: the error links to it, where another
      // build can be started (submitting this form again would meet the name, taken).
      await client.createBuild(service.id, git.request()).catch((err: unknown) => {
        setHalfMade(service);
        void queryClient.invalidateQueries({ queryKey: ['services'] });
        throw err;
      });
      return service;
    },
    onSuccess: async (service) => {
      await queryClient.invalidateQueries({ queryKey: ['services'] });
      navigate({ page: 'service', id: service.id });
    },
  });
  function onSubmit(e: SyntheticEvent) {
    e.preventDefault();
    setHalfMade(null);
    create.mutate();
  }
  return (
    <Section title="Create a service">
      <form onSubmit={onSubmit}>
        <fieldset className="choice">
          <legend>Source</legend>
          <label>
            <input type="radio" name="source" checked={source === 'image'} onChange={() => setSource('image')} /> From an image
          </label>
          <label>
            <input type="radio" name="source" checked={source === 'git'} onChange={() => setSource('git')} /> Built from git
          </label>
        </fieldset>
        <div className="row">
          <div>
            <label htmlFor="svc-name">Name</label>
            <input id="svc-name" required maxLength={128} pattern="[A-Za-z0-9 ._\-]+" value={name} onChange={(e) => setName(e.target.value)} />
          </div>
          {source === 'image' ? (
            <div>
              <label htmlFor="svc-image">Image</label>
              <input id="svc-image" required maxLength={512} value={image} onChange={(e) => setImage(e.target.value)} placeholder="nginx:alpine" />
            </div>
          ) : (
            git.fields
          )}
          <div>
            <label htmlFor="svc-port">Port</label>
            <input id="svc-port" type="number" min={0} max={65535} value={port} onChange={(e) => setPort(e.target.value)} placeholder="8000" />
          </div>
        </div>
        <button type="submit" disabled={create.isPending}>
          {create.isPending ? 'Creating…' : 'Create service'}
        </button>
        <ErrorNote error={create.error} />
        {create.isError && halfMade ? (
          <p>
            The service <a href={href({ page: 'service', id: halfMade.id })}>{halfMade.name}</a> was created, but its build did not start: open it to try the
            build again.
          </p>
        ) : null}
      </form>
    </Section>
  );
}

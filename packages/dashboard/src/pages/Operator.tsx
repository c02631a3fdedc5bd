// The operator's pages: tenants with status and usage, quotas, reactivate, recover, system
// health. The admin token is typed here once and held in this tab's memory only.
import { useMutation, useQuery, useQueryClient } from '@tanstack/react-query';
import { useState, type SyntheticEvent } from 'react';
import type { QuotaPatchRequest, RecoverResponse, ReactivateResponse, TenantSummary } from '@svc/client';
import { ApiError } from '@svc/client';
import { operator } from '../api.js';
import { Ago, bytes, ErrorNote, Pager, Secret, Section, Status, TableWrap } from '../ui.js';

const PAGE = 25;

export function Operator() {
  const queryClient = useQueryClient();
  const [token, setToken] = useState(operator.adminToken ?? '');
  const [signedIn, setSignedIn] = useState(operator.adminToken !== undefined);
  function onSubmit(e: SyntheticEvent) {
    e.preventDefault();
    operator.adminToken = token.trim();
    setSignedIn(true);
  }
  if (!signedIn) {
    return (
      <div className="narrow">
        <h1>Operator</h1>
        <form className="card" onSubmit={onSubmit}>
          <label htmlFor="admin-token">Admin token</label>
          <input id="admin-token" type="password" autoComplete="off" required value={token} onChange={(e) => setToken(e.target.value)} />
          <p className="hint">Held in this tab only, until it is closed or reloaded.</p>
          <button type="submit">Open operator pages</button>
        </form>
      </div>
    );
  }
  return (
    <>
      <div className="card-head">
        <h1>Operator</h1>
        <button
          type="button"
          onClick={() => {
            operator.adminToken = undefined;
            // Nothing read with the token stays for whoever types the next one.
            queryClient.removeQueries({ queryKey: ['operator'] });
            setToken('');
            setSignedIn(false);
          }}
        >
          Forget admin token
        </button>
      </div>
      <Health />
      <Nodes />
      <Tenants />
      <Recover />
    </>
  );
}

function Health() {
  const health = useQuery({ queryKey: ['operator', 'health'], queryFn: () => operator.healthDetailedAsOperator(), refetchInterval: 30_000 });
  const h = health.data;
  return (
    <Section title="System health">
      <ErrorNote error={health.error} />
      {h ? (
        <dl className="facts">
          <dt>Status</dt>
          <dd>
            <Status value={h.status} /> (checked <Ago unix={h.checked_at} />)
          </dd>
          <dt>Container engine</dt>
          <dd>{h.runtime.available ? 'available' : 'unavailable'}</dd>
          <dt>Sandbox</dt>
          <dd>{h.sandbox.available ? 'available' : 'unavailable'}</dd>
          <dt>Store</dt>
          <dd>
            {h.store.dialect}, {h.store.available ? 'available' : 'unavailable'}
          </dd>
          <dt>Disk</dt>
          <dd>
            {h.disk.used_percent}% used; engine's {h.runtime_disk.used_percent}% ({h.runtime_storage.total_size_gb} GB in images, containers and volumes)
          </dd>
          <dt>Egress firewall</dt>
          <dd>{h.egress_firewall.installed ? 'installed' : `missing: ${h.egress_firewall.detail}`}</dd>
          <dt>Nodes</dt>
          <dd>{h.nodes.total === 0 ? 'one engine' : `${h.nodes.total} (${h.nodes.down} down)`}</dd>
        </dl>
      ) : null}
    </Section>
  );
}

/** A Swarm cluster's nodes (--runtime swarm), drained and activated from here; one engine has none. */
function Nodes() {
  const queryClient = useQueryClient();
  const nodes = useQuery({
    queryKey: ['operator', 'nodes'],
    queryFn: async () => {
      try {
        return await operator.listClusterNodes();
      } catch (err) {
        // 409: this svcd runs on one engine, not a cluster: nothing to show.
        if (err instanceof ApiError && err.status === 409) return null;
        throw err;
      }
    },
    refetchInterval: 10_000,
  });
  const change = useMutation({
    mutationFn: ({ node, availability }: { node: string; availability: 'drain' | 'active' }) => operator.setClusterNodeAvailability(node, availability),
    onSettled: () => queryClient.invalidateQueries({ queryKey: ['operator', 'nodes'] }),
  });
  if (nodes.data === null) return null;
  return (
    <Section title="Cluster nodes">
      <ErrorNote error={nodes.error ?? change.error} />
      <ul className="plain">
        {(nodes.data ?? []).map((n) => (
          <li key={n.id}>
            <strong>{n.hostname}</strong> {n.role} <Status value={n.state === 'ready' ? 'ok' : n.state} /> {n.availability} · {n.tasks} tasks ·{' '}
            {n.cpus} CPUs, {bytes(n.memory_bytes)}
            <button
              type="button"
              className="small"
              onClick={() => change.mutate({ node: n.id, availability: n.availability === 'drain' ? 'active' : 'drain' })}
              aria-label={`${n.availability === 'drain' ? 'Activate' : 'Drain'} ${n.hostname}`}
            >
              {n.availability === 'drain' ? 'Activate' : 'Drain'}
            </button>
          </li>
        ))}
      </ul>
    </Section>
  );
}

function Tenants() {
  const queryClient = useQueryClient();
  const [offset, setOffset] = useState(0);
  const [editing, setEditing] = useState<string | null>(null);
  const [reactivated, setReactivated] = useState<ReactivateResponse | null>(null);
  const list = useQuery({ queryKey: ['operator', 'tenants', offset], queryFn: () => operator.listTenants({ limit: PAGE, offset }) });
  const reactivate = useMutation({
    mutationFn: (id: string) => operator.reactivateTenant(id),
    onSuccess: async (r) => {
      setReactivated(r);
      await queryClient.invalidateQueries({ queryKey: ['operator', 'tenants'] });
    },
  });
  return (
    <Section title="Tenants">
      <ErrorNote error={list.error ?? reactivate.error} />
      {reactivated ? <Secret label={`New API key of tenant ${reactivated.tenant_id}`} value={reactivated.api_key} note="Hand it to the tenant: it is shown only once." /> : null}
      <TableWrap label="Tenants table">
        <table>
          <thead>
            <tr>
              <th scope="col">Tenant</th>
              <th scope="col">Status</th>
              <th scope="col">Services</th>
              <th scope="col">Databases</th>
              <th scope="col">Environments</th>
              <th scope="col">Disk</th>
              <th scope="col">Registered</th>
              <th scope="col">
                <span className="visually-hidden">Actions</span>
              </th>
            </tr>
          </thead>
          <tbody>
            {(list.data ?? []).map((t: TenantSummary) => (
              <tr key={t.id}>
                <td>
                  {t.name}
                  <br />
                  <small>{t.email}</small>
                </td>
                <td>
                  <Status value={t.status} />
                </td>
                <td>
                  {t.usage.services.used}/{t.usage.services.max}
                </td>
                <td>
                  {t.usage.databases.used}/{t.usage.databases.max}
                </td>
                <td>
                  {t.usage.environments.used}/{t.usage.environments.max}
                </td>
                <td>
                  {bytes(t.usage.disk_used_bytes)} of {t.usage.disk_gb} GiB
                </td>
                <td>
                  <Ago unix={t.created_at} />
                </td>
                <td className="actions">
                  <button type="button" className="small" onClick={() => setEditing(editing === t.id ? null : t.id)} aria-label={`Quotas of ${t.name}`}>
                    Quotas
                  </button>
                  {t.status === 'suspended' ? (
                    <button type="button" className="small" disabled={reactivate.isPending} onClick={() => reactivate.mutate(t.id)} aria-label={`Reactivate ${t.name}`}>
                      Reactivate
                    </button>
                  ) : null}
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      </TableWrap>
      <Pager offset={offset} limit={PAGE} count={list.data?.length ?? 0} onChange={setOffset} />
      {/* Keyed: what was typed for one tenant never goes to another. */}
      {editing ? <Quotas key={editing} tenantId={editing} /> : null}
    </Section>
  );
}

const QUOTA_FIELDS: Array<[keyof QuotaPatchRequest, string]> = [
  ['max_services', 'Services'],
  ['max_databases', 'Databases'],
  ['max_builds_concurrent', 'Builds at once'],
  ['max_env_vars_per_service', 'Variables per service'],
  ['max_disk_gb', 'Disk (GiB)'],
  ['max_domains_per_service', 'Domains per service'],
];

function Quotas({ tenantId }: { tenantId: string }) {
  const queryClient = useQueryClient();
  const quotas = useQuery({ queryKey: ['operator', 'quotas', tenantId], queryFn: () => operator.tenantQuotas(tenantId) });
  const [patch, setPatch] = useState<Record<string, string>>({});
  const save = useMutation({
    mutationFn: () => {
      const body: QuotaPatchRequest = {};
      for (const [field] of QUOTA_FIELDS) {
        const v = patch[field];
        if (v !== undefined && v !== '') body[field] = Number(v);
      }
      return operator.patchQuotas(tenantId, body);
    },
    onSuccess: async (record) => {
      setPatch({});
      queryClient.setQueryData(['operator', 'quotas', tenantId], record);
      await queryClient.invalidateQueries({ queryKey: ['operator', 'tenants'] });
    },
  });
  const q = quotas.data;
  return (
    <form
      className="card"
      aria-label="Quotas"
      onSubmit={(e) => {
        e.preventDefault();
        save.mutate();
      }}
    >
      <h3>Quotas of {tenantId}</h3>
      <ErrorNote error={quotas.error} />
      {q ? (
        <div className="row">
          {QUOTA_FIELDS.map(([field, label]) => (
            <div key={field}>
              <label htmlFor={`quota-${field}`}>{label}</label>
              <input id={`quota-${field}`} type="number" min={0} placeholder={String(q[field])} value={patch[field] ?? ''} onChange={(e) => setPatch({ ...patch, [field]: e.target.value })} />
            </div>
          ))}
        </div>
      ) : null}
      <button type="submit" disabled={save.isPending}>
        Save quotas
      </button>
      {save.isSuccess ? <p className="hint">Saved.</p> : null}
      <ErrorNote error={save.error} />
    </form>
  );
}

function Recover() {
  const [email, setEmail] = useState('');
  const [issued, setIssued] = useState<RecoverResponse | null>(null);
  const recover = useMutation({ mutationFn: () => operator.recover(email.trim()), onSuccess: setIssued });
  return (
    <Section title="Recover a tenant's access">
      <form
        className="row"
        onSubmit={(e) => {
          e.preventDefault();
          recover.mutate();
        }}
      >
        <div className="grow">
          <label htmlFor="recover-email">Tenant email</label>
          <input id="recover-email" type="email" required value={email} onChange={(e) => setEmail(e.target.value)} />
        </div>
        <button type="submit" disabled={recover.isPending}>
          Issue a new key
        </button>
      </form>
      <ErrorNote error={recover.error} />
      {issued ? <Secret label={`New API key of tenant ${issued.tenant_id}`} value={issued.api_key} note="Hand it to the tenant: it is shown only once." /> : null}
    </Section>
  );
}

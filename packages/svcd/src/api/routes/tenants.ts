import {
  QuotaPatchRequest,
  QuotaRecord,
  ReactivateResponse,
  RegisterRequest,
  RegisterResponse,
  Tenant,
  TenantIdParams,
  TenantListQuery,
  TenantSummaryList,
  TenantUsage,
  UpdateTenantRequest,
} from '@svc/contract';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { Deps } from '../../app.js';
import { tenantOf } from '../guards.js';
import { errors, KEY_ROUTE_ERRORS } from './responses.js';
import { routePlugin } from './plugin.js';

export function tenantRoutes(deps: Deps): FastifyPluginAsyncTypebox {
  const { tenants } = deps;
  return routePlugin((app) => {
    app.post(
      '/v1/tenants/register',
      {
        config: { svc: { auth: 'bootstrap', registrationLimited: true } },
        schema: {
          summary: 'Registers a tenant and returns its first API key (X-Bootstrap-Token, unless --dev --open-registration)',
          tags: ['tenants'],
          body: RegisterRequest,
          response: { 201: RegisterResponse, ...errors(400, 401, 422, 429, 503) },
        },
      },
      async (request, reply) => reply.code(201).send(await tenants.register(request.body)),
    );

    app.get(
      '/v1/tenant',
      {
        config: { svc: { auth: 'key' } },
        schema: { summary: 'The calling tenant', tags: ['tenants'], response: { 200: Tenant, ...errors(...KEY_ROUTE_ERRORS) } },
      },
      async (request) => tenants.get(tenantOf(request)),
    );

    app.patch(
      '/v1/tenant',
      {
        config: { svc: { auth: 'key' } },
        schema: {
          summary: 'Renames the tenant (only the name can change)',
          tags: ['tenants'],
          body: UpdateTenantRequest,
          response: { 200: Tenant, ...errors(...KEY_ROUTE_ERRORS, 409) },
        },
      },
      async (request) => tenants.rename(tenantOf(request), request.body.name),
    );

    app.delete(
      '/v1/tenant',
      {
        config: { svc: { auth: 'key' } },
        schema: {
          summary: 'Suspends the tenant: its workloads stop, its keys stop working; an operator can reactivate it',
          tags: ['tenants'],
          response: { 200: Tenant, ...errors(...KEY_ROUTE_ERRORS) },
        },
      },
      async (request) => tenants.suspend(tenantOf(request)),
    );

    app.get(
      '/v1/tenant/usage',
      {
        config: { svc: { auth: 'key' } },
        schema: { summary: 'Usage against quota', tags: ['tenants'], response: { 200: TenantUsage, ...errors(...KEY_ROUTE_ERRORS) } },
      },
      async (request) => tenants.usage(tenantOf(request)),
    );

    app.post(
      '/v1/tenants/:tenantID/reactivate',
      {
        config: { svc: { auth: 'operator', registrationLimited: true } },
        schema: {
          summary: 'Operator: reactivates a suspended tenant and returns a new API key',
          tags: ['operator'],
          params: TenantIdParams,
          response: { 200: ReactivateResponse, ...errors(401, 403, 404, 409, 429, 503) },
        },
      },
      async (request) => tenants.reactivate(request.params.tenantID),
    );

    app.get(
      '/v1/tenants',
      {
        config: { svc: { auth: 'operator', adminOnly: true } },
        schema: {
          summary: 'Operator (beyond the spec): tenants with their status and usage, oldest first, paginated',
          tags: ['operator'],
          querystring: TenantListQuery,
          response: { 200: TenantSummaryList, ...errors(400, 401, 403, 429) },
        },
      },
      async (request) => tenants.listForOperator(request.query),
    );

    app.get(
      '/v1/tenants/:tenantID/quotas',
      {
        config: { svc: { auth: 'operator', adminOnly: true } },
        schema: {
          summary: "Operator (beyond the spec): the tenant's quota record, as the patch returns it",
          tags: ['operator'],
          params: TenantIdParams,
          response: { 200: QuotaRecord, ...errors(401, 403, 404, 429) },
        },
      },
      async (request) => tenants.quotas(request.params.tenantID),
    );

    app.patch(
      '/v1/tenants/:tenantID/quotas',
      {
        config: { svc: { auth: 'operator', registrationLimited: true } },
        schema: {
          summary: 'Operator: changes quota maxima (integers, at least 1, within each cap)',
          tags: ['operator'],
          params: TenantIdParams,
          body: QuotaPatchRequest,
          response: { 200: QuotaRecord, ...errors(400, 401, 403, 404, 429) },
        },
      },
      async (request) => tenants.patchQuotas(request.params.tenantID, request.body),
    );
  });
}

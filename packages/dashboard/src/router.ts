// Hash routes (#/services/ID): svcd serves one page at /, so every view is a fragment of it and
// a reload or a shared link opens the same view.
import { useEffect, useState } from 'react';

export type Route =
  | { page: 'overview' }
  | { page: 'services' }
  | { page: 'service'; id: string }
  | { page: 'databases' }
  | { page: 'environments' }
  | { page: 'environment'; id: string }
  | { page: 'board' }
  | { page: 'keys' }
  | { page: 'activity' }
  | { page: 'operator' };

/** Resource ids are hex (svc makes them): anything else in a link opens the list instead. */
const ID = /^[A-Za-z0-9_-]{1,64}$/;

export function parseRoute(hash: string): Route {
  const [first, rawId] = hash.replace(/^#\/?/, '').split('/').filter(Boolean);
  const id = rawId !== undefined && ID.test(rawId) ? rawId : undefined;
  switch (first) {
    case 'services':
      return id ? { page: 'service', id } : { page: 'services' };
    case 'environments':
      return id ? { page: 'environment', id } : { page: 'environments' };
    case 'databases':
    case 'board':
    case 'keys':
    case 'activity':
    case 'operator':
      return { page: first };
    default:
      return { page: 'overview' };
  }
}

export function href(route: Route): string {
  switch (route.page) {
    case 'overview':
      return '#/';
    case 'service':
      return `#/services/${encodeURIComponent(route.id)}`;
    case 'environment':
      return `#/environments/${encodeURIComponent(route.id)}`;
    default:
      return `#/${route.page}`;
  }
}

export function useRoute(): Route {
  const [route, setRoute] = useState(() => parseRoute(window.location.hash));
  useEffect(() => {
    const onChange = () => setRoute(parseRoute(window.location.hash));
    window.addEventListener('hashchange', onChange);
    return () => window.removeEventListener('hashchange', onChange);
  }, []);
  return route;
}

export function navigate(route: Route): void {
  window.location.hash = href(route);
}

/** Discovery (legacy and aggregated) and OpenAPI v3: the GETs of paths that are not resources. */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { resourceNotFound } from '../errors.ts';
import {
  AGGREGATED_CONTENT_TYPE,
  aggregatedDiscovery,
  legacyApiVersions,
  legacyGroup,
  legacyGroupList,
  legacyResourceList,
} from './discovery.ts';
import { sendJson } from './http.ts';
import { openApiDocument, openApiIndex } from './openapi.ts';

/** Serves discovery and OpenAPI; false when `path` is not one of them. */
export function serveNonResource(req: IncomingMessage, res: ServerResponse, path: string): boolean {
  const p = path.replace(/\/$/, '');
  const aggregated = /g=apidiscovery\.k8s\.io;v=v2/.test(String(req.headers.accept ?? ''));
  if (p === '/api' || p === '/apis') {
    if (aggregated) {
      const body = JSON.stringify(aggregatedDiscovery(p === '/api'));
      res.writeHead(200, { 'Content-Type': AGGREGATED_CONTENT_TYPE, 'Content-Length': Buffer.byteLength(body), Vary: 'Accept' });
      res.end(body);
    } else sendJson(res, 200, p === '/api' ? legacyApiVersions(req) : legacyGroupList(), { Vary: 'Accept' });
    return true;
  }
  if (p === '/api/v1') {
    sendJson(res, 200, legacyResourceList('', 'v1'));
    return true;
  }
  const g = /^\/apis\/([^/]+)$/.exec(p);
  if (g) {
    const doc = legacyGroup(g[1]!);
    if (!doc) throw resourceNotFound();
    sendJson(res, 200, doc);
    return true;
  }
  const gv = /^\/apis\/([^/]+)\/([^/]+)$/.exec(p);
  if (gv) {
    const doc = legacyResourceList(gv[1]!, gv[2]!);
    if (!doc) throw resourceNotFound();
    sendJson(res, 200, doc);
    return true;
  }
  if (p === '/openapi/v3') {
    sendJson(res, 200, openApiIndex());
    return true;
  }
  if (p.startsWith('/openapi/v3/')) {
    const doc = openApiDocument(p.slice('/openapi/v3/'.length));
    if (!doc) throw resourceNotFound();
    res.writeHead(200, { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(doc), 'Cache-Control': 'public, immutable' });
    res.end(doc);
    return true;
  }
  if (p === '/openapi/v2' || p === '/swagger.json') throw resourceNotFound();
  return false;
}


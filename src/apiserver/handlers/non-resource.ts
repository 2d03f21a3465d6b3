/** Discovery (legacy and aggregated), OpenAPI v3 and an empty v2: the GETs of paths that are not resources. */
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
  if (p === '/openapi/v2' || p === '/swagger.json') {
    // kubectl asks for it as protobuf; other clients for JSON.
    if (/proto-openapi\.spec\.v2[@.]v1\.0\+protobuf/.test(String(req.headers.accept ?? ''))) {
      res.writeHead(200, { 'Content-Type': OPENAPI_V2_PROTOBUF, 'Content-Length': EMPTY_V2_PROTOBUF.length, Vary: 'Accept' });
      res.end(EMPTY_V2_PROTOBUF);
    } else sendJson(res, 200, EMPTY_V2_JSON, { Vary: 'Accept' });
    return true;
  }
  return false;
}

/**
 * The content type of /openapi/v2 as protobuf. kubectl asks for `...spec.v2@v1.0+protobuf`, which Go's
 * mime parser refuses in an answer ('@' is no token character): kube-apiserver answers with a '.' instead.
 */
const OPENAPI_V2_PROTOBUF = 'application/com.github.proto-openapi.spec.v2.v1.0+protobuf';

const V2_INFO = { title: 'Kubernetes', version: 'v1.32.0-kube32' };

/**
 * /openapi/v2 holds no paths and no definitions: the schemas are in /openapi/v3, which kubectl reads first.
 * kubectl falls back to v2 only for a kind v3 has no PATCH operation for (a Binding: POST only, as in
 * Kubernetes), to check the `fieldValidation` parameter and then validate on the client; an empty v2
 * document tells it there is no schema to check against, so the object goes to the server, which
 * validates it, instead of kubectl stopping with "failed to download openapi". The protobuf is gnostic's
 * `openapi.v2.Document` (swagger = 1, info = 2 with title = 1 and version = 2), written by hand here: two
 * strings do not call for the whole of gnostic's schema.
 */
const EMPTY_V2_PROTOBUF = ((): Buffer => {
  const str = (field: number, v: string) => {
    const b = Buffer.from(v);
    return Buffer.concat([Buffer.from([(field << 3) | 2, b.length]), b]);
  };
  const info = Buffer.concat([str(1, V2_INFO.title), str(2, V2_INFO.version)]);
  return Buffer.concat([str(1, '2.0'), Buffer.from([(2 << 3) | 2, info.length]), info]);
})();

const EMPTY_V2_JSON = { swagger: '2.0', info: V2_INFO, paths: {}, definitions: {} };


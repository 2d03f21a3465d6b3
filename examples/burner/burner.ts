// burner: burns CPU on request, for the HorizontalPodAutoscaler: `GET /burn?ms=N` spins for N ms of
// its pod clock (100 by default, at most 5000, well inside the call deadline) and answers how long it
// spun and how many burns it has served. `GET /healthz` answers at once. Its pod's CPU shows in
// `kubectl top pods`, and an HPA on CPU scales its Deployment while a client keeps it busy.
// Built by `npm run build` into build/examples/burner.wasm.
import { Request, Response, handle, log, timeMs } from "../../sdk/assemblyscript/index";
export { k32_alloc } from "../../sdk/assemblyscript/index";

const DEFAULT_MS: i64 = 100;
const MAX_MS: i64 = 5000;

let burns: i64 = 0;
let spunMs: i64 = 0;
// Kept in a global so that the optimiser cannot drop the loop's work.
let sink: u32 = 1;

export function k32_init(): void {
  log("burner: ready");
}

/** The value of query parameter `name` in `target`, or null. */
function query(target: string, name: string): string | null {
  const q = target.indexOf("?");
  if (q < 0) return null;
  const pairs = target.substring(q + 1).split("&");
  for (let i = 0; i < pairs.length; i++) {
    const eq = pairs[i].indexOf("=");
    if (eq > 0 && pairs[i].substring(0, eq) == name) return pairs[i].substring(eq + 1);
  }
  return null;
}

/** Spins for `ms` of the pod clock; answers the ms spun. */
function burn(ms: i64): i64 {
  const start = timeMs();
  let now = start;
  while (now - start < ms) {
    for (let i = 0; i < 10000; i++) sink = sink * 1664525 + 1013904223;
    now = timeMs();
  }
  return now - start;
}

export function k32_handle(ptr: i32, len: i32): i64 {
  return handle(ptr, len, (req: Request): Response => {
    if (req.path == "/healthz") return Response.text(200, "ok\n");
    if (req.path != "/burn") return Response.text(404, "not found: GET /burn?ms=N or /healthz\n");
    let ms = DEFAULT_MS;
    const v = query(req.target, "ms");
    if (v !== null) {
      const n = I64.parseInt(v);
      if (n < 0 || n > MAX_MS) return Response.text(400, "ms must be 0 to 5000\n");
      ms = n;
    }
    const spun = burn(ms);
    burns++;
    spunMs += spun;
    const json = "{\"spunMs\":" + spun.toString() + ",\"burns\":" + burns.toString() + ",\"totalMs\":" + spunMs.toString() + ",\"sink\":" + sink.toString() + "}\n";
    return Response.json(200, json);
  });
}

// counter: counts the requests it answers and the ticks it gets, and answers its count, its tick
// count, its pod clock and the node it runs on. Its state lives in globals, so a move carries it:
// after `kube32-cli move`, the count goes on from where it was and the node changes.
// Built by `npm run build` into build/examples/counter.wasm.
import { Request, Response, handle, log, env, timeMs } from "../../sdk/assemblyscript/index";
export { k32_alloc } from "../../sdk/assemblyscript/index";

let count: i64 = 0;
let ticks: i64 = 0;
let restores: i32 = 0;

export function k32_init(): void {
  log("counter: started afresh");
}

export function k32_restored(): void {
  restores++;
  log("counter: restored at count " + count.toString() + ", pod time " + timeMs().toString() + " ms");
}

export function k32_tick(): void {
  ticks++;
}

export function k32_handle(ptr: i32, len: i32): i64 {
  return handle(ptr, len, (req: Request): Response => {
    if (req.path == "/healthz") return Response.text(200, "ok\n");
    if (req.path != "/" && req.path != "/count") return Response.text(404, "not found\n");
    if (req.method == "POST" || req.method == "GET") count++;
    let node = "";
    const n = env("NODE_NAME");
    if (n !== null) node = n;
    const json = "{\"count\":" + count.toString() + ",\"ticks\":" + ticks.toString() + ",\"podTimeMs\":" + timeMs().toString() +
      ",\"restores\":" + restores.toString() + ",\"node\":\"" + node + "\"}\n";
    return Response.json(200, json);
  });
}

// echo: answers every request with what it received (method, path, headers, body), as JSON.
// Built by `npm run build` into build/examples/echo.wasm.
import { Request, Response, handle, log } from "../../sdk/assemblyscript/index";
export { k32_alloc } from "../../sdk/assemblyscript/index";

export function k32_init(): void {
  log("echo: ready");
}

function quote(s: string): string {
  let out = "\"";
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c == 34) out += "\\\"";
    else if (c == 92) out += "\\\\";
    else if (c < 32) out += "\\u00" + (c < 16 ? "0" : "") + c.toString(16);
    else out += String.fromCharCode(c);
  }
  return out + "\"";
}

export function k32_handle(ptr: i32, len: i32): i64 {
  return handle(ptr, len, (req: Request): Response => {
    let headers = "{";
    for (let i = 0; i < req.headerNames.length; i++) {
      if (i > 0) headers += ",";
      headers += quote(req.headerNames[i]) + ":" + quote(req.headerValues[i]);
    }
    headers += "}";
    const json = "{\"method\":" + quote(req.method) + ",\"path\":" + quote(req.target) + ",\"headers\":" + headers + ",\"body\":" + quote(req.text()) + "}\n";
    return Response.json(200, json);
  });
}

// An HTTP probe for the root suites, run inside a pod's namespace:
// `http-probe.ts METHOD URL [HEADER:VALUE ...]`. Prints the body, a newline and the status.
const [method, url, ...headers] = process.argv.slice(2);
const res = await fetch(url, {
  method,
  headers: Object.fromEntries(headers.map((h) => [h.slice(0, h.indexOf(':')), h.slice(h.indexOf(':') + 1).trim()])),
  signal: AbortSignal.timeout(5_000),
});
process.stdout.write(`${await res.text()}\n${res.status}`);

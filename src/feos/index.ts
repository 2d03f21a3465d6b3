/**
 * FeOS's door (seed 000): feosd put together, for what starts one (bin/feosd.js runs ./main.ts, the
 * tests and the fleet start it in-process). Its layers each have a door of their own: ./api, ./ctl,
 * ./guest, ./host, ./microvm, ./network, ./pods, ./store, ./volumes (index.ts each).
 */
export { startFeosd, checkTcpAddress, type Feosd, type FeosdOptions, type CloseOptions } from './daemon.ts';
export { main as feosdMain, MAX_STOP_GRACE_S, registryForward, vmsCgroup, vmsCgroupHint } from './main.ts';

/** feosctl, the command line of a node's feosd (docs/feos/feosctl.md): its program and what its tests check. */
export { main } from './main.ts';
export { connectFailureMessage, isConnectFailure, type CtlContext } from './context.ts';

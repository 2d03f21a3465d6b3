import { x } from './u.ts';
export const y = x + 1;
console.log(y);
//# sourceMappingURL=t.js.map
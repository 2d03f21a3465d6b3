/**
 * The steps of a long suite that builds on itself (a node joins, then its pod runs, then it moves): each
 * step a subtest; once one fails the later ones are skipped naming it (they would fail for its reason and
 * hide it), and the failing step prints what the suite's processes said last.
 */
import type { TestContext } from 'node:test';

/** A step of the suite: `name` as the subtest's, `fn` its body. */
export type Step = (name: string, fn: () => Promise<void>) => Promise<void>;

/**
 * The step runner of one suite.
 * @param t the suite's test
 * @param diagnose what to print when a step fails, each string one diagnostic (the tails of the processes'
 *   logs); called only then
 * @returns the step runner; a step's error is thrown on (its subtest fails), the later steps skipped
 * @example const step = steps(t, () => [`feosd's log:\n${tail(feosd.stderr(), 30)}`]);
 */
export function steps(t: TestContext, diagnose: () => string[]): Step {
  let broken = '';
  return (name, fn) =>
    t.test(name, { skip: broken ? `an earlier step failed: ${broken}` : false }, async () => {
      try {
        await fn();
      } catch (err: unknown) {
        broken = name;
        for (const d of diagnose()) t.diagnostic(d);
        throw err;
      }
    });
}

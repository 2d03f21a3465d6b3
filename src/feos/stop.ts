/**
 * feosd's side of "Suspend on stop" (seed 000): at its start, the pods a stop before recorded in
 * `<state>/suspended-for-stop.json` are resumed, four at a time, and the record removed once they were
 * all tried; at its stop, the pods not tried yet stay recorded and, with `--suspend-on-stop`, the
 * running pods are suspended and recorded one by one (src/feos/pods/suspend-on-stop.ts).
 */
import type { Logger } from '../lib/index.ts';
import { errorMessage } from './api/index.ts';
import {
  type PodService,
  readStopRecord,
  removeStopRecord,
  resumeAfterStop,
  setStopRecordAside,
  STOP_MARGIN_MS,
  stopRecordPath,
  suspendForStop,
  writeStopRecord,
} from './pods/index.ts';

/** The record of one feosd's life: what it resumes at its start and what its stop keeps. */
export class StopRecordKeeper {
  readonly #path: string;
  readonly #pods: PodService;
  readonly #log: Logger;
  /** The recorded pods not resumed yet (none tried once the resumes end). */
  #notResumed: string[] = [];
  /** The time of the stop they came from. */
  #previousStop?: string;
  #resumes: Promise<void> = Promise.resolve();

  constructor(stateDir: string, pods: PodService, log: Logger) {
    this.#path = stopRecordPath(stateDir);
    this.#pods = pods;
    this.#log = log;
  }

  /** Resolves once the resumes of a record ended (at once without one). */
  get resumes(): Promise<void> {
    return this.#resumes;
  }

  /**
   * Resumes the recorded pods still SUSPENDED in the background, four at a time; removes the record
   * once all were tried. A record that is not one is moved to `.bad` and nothing is resumed.
   * @param stopping aborted when this feosd begins to stop: no more resumes start
   */
  startResumes(stopping: AbortSignal): void {
    this.#resumes = (async () => {
      let record: Awaited<ReturnType<typeof readStopRecord>>;
      try {
        record = await readStopRecord(this.#path);
      } catch (err: unknown) {
        const aside = await setStopRecordAside(this.#path);
        this.#log.error(
          { err: errorMessage(err) },
          aside.moved ? `suspend on stop: the record is not one; moved to ${aside.to}, nothing resumed` : `suspend on stop: the record is not one and could not be moved to ${aside.to} (${aside.why}); nothing resumed`,
        );
        return;
      }
      if (!record) return;
      this.#previousStop = record.stoppedAt;
      this.#notResumed = record.pods;
      this.#log.info({ pods: record.pods, stoppedAt: record.stoppedAt }, 'suspend on stop: resuming the pods the last stop suspended');
      this.#notResumed = await resumeAfterStop(this.#pods, record.pods, { log: this.#log, signal: stopping });
      if (stopping.aborted) return;
      await removeStopRecord(this.#path).catch((err: unknown) => this.#log.error({ err: errorMessage(err) }, 'suspend on stop: the record was not removed'));
      this.#log.info('suspend on stop: the resumes are done; the record is removed');
    })();
  }

  /**
   * The stop's part, after the calls in flight: waits for the resumes running, keeps the pods not
   * resumed yet in the record, and with `suspendOnStop` suspends the running pods until 10 s before
   * `graceEndsAt` (`Date.now()` ms), recording each. Failures are logged, never thrown.
   */
  async stop(suspendOnStop: boolean, graceEndsAt: number): Promise<void> {
    await this.#resumes;
    const stoppedAt = new Date().toISOString();
    const recorded = [...this.#notResumed];
    const kept = recorded.length;
    const keep = () => writeStopRecord(this.#path, { stoppedAt: recorded.length > kept ? stoppedAt : (this.#previousStop ?? stoppedAt), pods: recorded });
    if (kept > 0) {
      await keep().catch((err: unknown) => this.#log.error({ err: errorMessage(err) }, 'suspend on stop: the record was not written'));
      this.#log.info({ pods: recorded }, 'suspend on stop: the pods not resumed yet stay recorded');
    }
    if (!suspendOnStop) return;
    const result = await suspendForStop(this.#pods, {
      deadline: graceEndsAt - STOP_MARGIN_MS,
      log: this.#log,
      record: async (id) => {
        recorded.push(id);
        try {
          await keep();
        } catch (err: unknown) {
          recorded.splice(recorded.lastIndexOf(id), 1);
          throw err;
        }
      },
      unrecord: async (id) => {
        const i = recorded.lastIndexOf(id);
        if (i < kept) return;
        recorded.splice(i, 1);
        await keep();
      },
    });
    this.#log.info(result, 'suspend on stop: done');
  }
}

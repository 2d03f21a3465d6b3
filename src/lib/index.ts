/** Small pieces shared by more than one component. */
export { parseDuration, parseTimerDuration, humanDuration } from './duration.ts';
export { parseQuantity, parseBytes, formatBytes } from './quantity.ts';
export { AtomicFileWriter, writeFileAtomic, writeFileAtomicSync } from './atomic-write.ts';
export { createLogger, type Logger } from './log.ts';
export { isProcessAlive } from './process.ts';
export { canListen, ephemeralLow, unusedPort } from './ports.ts';
export { isBareModuleImage } from './images.ts';
export { Backoff, type BackoffOptions } from './backoff.ts';
export { clampDelay, ManualClock, MAX_TIMER_DELAY_MS, realClock, type TimerClock, WorkQueue, type WorkQueueOptions } from './workqueue.ts';
export { type CronSchedule, CronScheduleError, isTimeZone, parseCronSchedule } from './cron-schedule.ts';
export { serviceDefinition } from './grpc-service.ts';
export { PARENT_PID_ENV, watchParent } from './parent-watch.ts';
export { pauseAt } from './test-pause.ts';
export { MinHeap } from './min-heap.ts';

// The in-memory driver held to the driver port's contract (driver-conformance.ts), with no engine.
import { MemoryDriver } from '../src/runtime/memory/memory-driver.js';
import { driverConformance } from './driver-conformance.js';
import { ManualClock } from './manual-clock.js';

driverConformance('memory', () => {
  // The driver's time runs twenty times faster than real time: its readiness deadlines, restart
  // delays and slow starts pass in milliseconds (the real engine's run of the cases takes real time).
  const clock = new ManualClock(Date.now());
  const stopClock = clock.run(20);
  const driver = new MemoryDriver({
    clock,
    timers: clock,
    images: {
      serving: { serves: true, startsAfterMs: 100, output: 'svc-test starting on port 8000' },
      idle: {},
      exiting: { exitsAfterMs: 0, exitCode: 7, output: 'giving up' },
    },
  });
  return Promise.resolve({
    driver,
    serving: { image: 'serving' },
    idle: { image: 'idle' },
    exiting: { image: 'exiting' },
    missing: 'missing',
    cleanup: async (tenantIds) => {
      for (const tenantId of tenantIds) for (const w of await driver.list({ tenantId })) await driver.remove(w.id);
      await driver.close();
      stopClock();
    },
    networksOf: (ref) => {
      const network = driver.networkOf(ref);
      return Promise.resolve(network === undefined ? [] : [network ?? 'warm-pool']);
    },
    // Its subscribers are listening from their first read.
    eventsOpenMs: 0,
  });
});

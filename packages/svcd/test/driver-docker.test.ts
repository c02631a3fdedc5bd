// The Docker Engine driver held to the driver port's contract (driver-conformance.ts), on the
// real engine: the same cases the in-memory driver passes.
import { DockerRuntime, TENANT_NETWORK_PREFIX, WARM_POOL_NETWORK } from '../src/runtime/index.js';
import { driverConformance } from './driver-conformance.js';
import { DOCKER_HOST } from './harness.js';
import { BUSYBOX_IMAGE, EXITER_IMAGE, TEST_REGISTRY, docker, ensureTestImages } from './images.js';
import { TEMPLATE_IMAGES, ensureTemplateImages } from './operator-images.js';

driverConformance('docker', async () => {
  await ensureTestImages();
  await ensureTemplateImages();
  const driver = new DockerRuntime({ host: DOCKER_HOST, installation: `conformance-${process.pid}` });
  return {
    driver,
    serving: { image: BUSYBOX_IMAGE },
    // coreutils' timeout, which the Docker driver's exec runs the command under, is in the templates.
    idle: { image: TEMPLATE_IMAGES.default, entrypoint: ['sleep'], cmd: ['infinity'] },
    exiting: { image: EXITER_IMAGE },
    missing: `${TEST_REGISTRY}/svc-test/no-such-image:1`,
    cleanup: async (tenantIds) => {
      for (const tenantId of tenantIds) {
        for (const w of await driver.list({ tenantId })) await driver.remove(w.id);
        await driver.releaseTenant(tenantId);
      }
    },
    networksOf: async (ref) =>
      Object.keys((await docker.getContainer(ref).inspect()).NetworkSettings.Networks).map((n) => (n === WARM_POOL_NETWORK ? 'warm-pool' : n.replace(TENANT_NETWORK_PREFIX, ''))),
  };
});

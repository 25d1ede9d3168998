import { runService } from '../../src/run.js';
import { benchRoutes } from './bench.routes.js';
import { businessStep, businessStepMs } from './business-step.js';

// The service as `npm start` runs it, plus the benchmark routes (/bench/*) and the business step
// (CRITICAL_SECTION_DELAY_MS): what the load test measures.
runService({ routes: benchRoutes, whileHeld: businessStep(businessStepMs()) });

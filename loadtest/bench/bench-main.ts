import { runService } from '../../src/run.js';
import { benchRoutes } from './bench.routes.js';

// The service as `npm start` runs it, plus the benchmark routes (/bench/*): what the load test measures.
runService(benchRoutes);

import { runService } from './run.js';

// The product's entry point: the service with its own routes and nothing else.
runService();

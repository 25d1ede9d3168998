import { type Logger, pino } from 'pino';

export type { Logger };

export function createLogger(level: string): Logger {
  return pino({
    level,
    // Secrets never reach the log, wherever they appear.
    redact: {
      paths: [
        'req.headers.authorization',
        'adminToken',
        'metricsToken',
        'customerTokens.secret',
        'databaseUrl',
        'redisUrl',
        '*.password',
      ],
      censor: '[redacted]',
    },
  });
}

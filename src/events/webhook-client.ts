import { createRequire } from 'node:module';
import type * as Undici from 'undici';
import type { DestinationGuard } from './webhook-destinations.js';

/** What a delivery record says when no HTTP answer came back. */
export type DeliveryFailure = 'unreachable' | 'timeout' | 'tls';

export interface WebhookHttpClient {
  undici: typeof Undici;
  dispatcher: Undici.Agent;
}

/**
 * undici and an Agent whose every new connection first passes `guard`: the host is resolved, each address checked,
 * and the socket opened to the checked address (the original name still names the TLS server and the Host header).
 * Kept-alive connections are reused as they are: they were checked when made. Loaded on first need (see
 * WebhookDelivery.client).
 */
export function loadWebhookClient(guard: DestinationGuard): WebhookHttpClient {
  const undici = createRequire(import.meta.url)('undici') as typeof Undici;
  const connect = undici.buildConnector({});
  const guarded: Undici.buildConnector.connector = (options, callback) => {
    guard.resolve(options.hostname).then(
      (address) => connect({ ...options, hostname: address }, callback),
      (error: Error) => callback(error, null),
    );
  };
  return { undici, dispatcher: new undici.Agent({ connect: guarded }) };
}

const TIMEOUTS = new Set(['UND_ERR_CONNECT_TIMEOUT', 'UND_ERR_HEADERS_TIMEOUT', 'UND_ERR_BODY_TIMEOUT', 'ETIMEDOUT']);
/** OpenSSL's certificate verdicts that Node passes on as they are (the others start ERR_TLS_ or ERR_SSL_). */
const CERTIFICATE = /^(ERR_TLS_|ERR_SSL_|CERT_|DEPTH_ZERO_|SELF_SIGNED_|UNABLE_TO_|HOSTNAME_MISMATCH)/;

/**
 * One coarse reason for a failed attempt without an HTTP answer. A refused destination, a closed port, an open port
 * that speaks something else and a name that does not resolve all read `unreachable`, so the records cannot be used
 * to tell which of them a URL met (a port scan through the service).
 */
export function failureOf(error: unknown): DeliveryFailure {
  const code = (error as { code?: unknown } | null)?.code;
  if (typeof code === 'string') {
    if (TIMEOUTS.has(code)) return 'timeout';
    if (CERTIFICATE.test(code)) return 'tls';
  }
  return 'unreachable';
}

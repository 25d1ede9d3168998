import { connect } from 'node:net';

export interface RawResponse {
  /** 0 when the connection closed without an HTTP answer. */
  status: number;
  headers: Record<string, string>;
  body: string;
}

/**
 * Sends bytes exactly as given — any method, path or header value, control characters included, which fetch and
 * http.request refuse to send — on a fresh connection, and reads the answer until the server closes it. The caller
 * includes `Connection: close`.
 */
export function rawRequest(port: number, request: Buffer, timeoutMs = 10_000): Promise<RawResponse> {
  return new Promise((resolve, reject) => {
    const socket = connect({ host: '127.0.0.1', port });
    const chunks: Buffer[] = [];
    const timer = setTimeout(() => {
      socket.destroy();
      reject(
        new Error(`no answer within ${timeoutMs} ms to ${JSON.stringify(request.subarray(0, 200).toString('latin1'))}`),
      );
    }, timeoutMs);
    // Write without half-closing: Node's HTTP server ends a connection whose client sent FIN, even mid-request.
    socket.on('connect', () => socket.write(request));
    socket.on('data', (chunk: Buffer) => chunks.push(chunk));
    // The server may answer and reset before reading everything we sent; what it answered still counts.
    socket.on('error', () => {});
    socket.on('close', () => {
      clearTimeout(timer);
      resolve(parseResponse(Buffer.concat(chunks)));
    });
  });
}

function parseResponse(raw: Buffer): RawResponse {
  const text = raw.toString('latin1');
  const headerEnd = text.indexOf('\r\n\r\n');
  const head = headerEnd >= 0 ? text.slice(0, headerEnd) : text;
  const status = /^HTTP\/1\.[01] (\d{3})/.exec(head);
  if (!status) return { status: 0, headers: {}, body: '' };
  const headers: Record<string, string> = {};
  for (const line of head.split('\r\n').slice(1)) {
    const colon = line.indexOf(':');
    if (colon > 0) headers[line.slice(0, colon).trim().toLowerCase()] = line.slice(colon + 1).trim();
  }
  // latin1 maps bytes one to one, so string offsets are byte offsets.
  let body = headerEnd >= 0 ? raw.subarray(headerEnd + 4) : Buffer.alloc(0);
  if (headers['transfer-encoding']?.toLowerCase() === 'chunked') body = dechunk(body);
  return { status: Number(status[1]), headers, body: body.toString('utf8') };
}

function dechunk(body: Buffer): Buffer {
  const parts: Buffer[] = [];
  let offset = 0;
  while (offset < body.length) {
    const lineEnd = body.indexOf('\r\n', offset);
    if (lineEnd < 0) break;
    const size = parseInt(body.subarray(offset, lineEnd).toString('latin1'), 16);
    if (!Number.isFinite(size) || size === 0) break;
    parts.push(body.subarray(lineEnd + 2, lineEnd + 2 + size));
    offset = lineEnd + 2 + size + 2;
  }
  return Buffer.concat(parts);
}

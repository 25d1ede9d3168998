// The dashboard: one event stream per page for the chosen SKU. EventSource cannot send an Authorization header, so
// the stream is read with fetch(); the token comes from the URL fragment (#token=…, never sent to the server nor
// kept in history) or from the form, and lives in sessionStorage for this tab only.
const TOKEN_KEY = 'segmented-stock-token';
const $ = (id) => document.getElementById(id);

function takeTokenFromFragment() {
  const match = /(?:^#|&)token=([^&]+)/.exec(location.hash);
  if (match) {
    sessionStorage.setItem(TOKEN_KEY, decodeURIComponent(match[1]));
    history.replaceState(null, '', location.pathname + location.search);
  }
}

const authHeaders = () => {
  const token = sessionStorage.getItem(TOKEN_KEY);
  return token ? { authorization: `Bearer ${token}` } : {};
};

function askForToken(problem) {
  $('token-form').hidden = false;
  $('token-problem').textContent = problem;
  $('connection').textContent = 'token needed';
}

// A token that is not valid answers 401 with error="invalid_token"; a valid one without metrics:read, 403.
function tokenProblem(response) {
  if (response.status === 403) return 'token rejected: it may not read metrics';
  return /invalid_token/.test(response.headers.get('www-authenticate') ?? '') ? 'token rejected' : '';
}

let stream; // AbortController of the current event stream

async function loadSkuList(selected) {
  const response = await fetch('/dashboard/skus', { headers: authHeaders() });
  if (response.status === 401 || response.status === 403) return askForToken(tokenProblem(response));
  if (!response.ok) return;
  const { skus } = await response.json();
  const list = $('sku-list');
  list.replaceChildren(new Option('choose a SKU…', ''));
  for (const { sku } of skus) list.add(new Option(sku, sku, false, sku === selected));
  if (selected && ![...list.options].some((o) => o.value === selected))
    list.add(new Option(selected, selected, false, true));
}

async function watch(sku) {
  stream?.abort();
  sale = null;
  if (!sku) return;
  const controller = new AbortController();
  stream = controller;
  $('main').hidden = false;
  $('sku-name').textContent = sku;
  for (let delay = 1000; !controller.signal.aborted; delay = Math.min(delay * 2, 10_000)) {
    try {
      const response = await fetch(`/dashboard/events?sku=${encodeURIComponent(sku)}`, {
        headers: authHeaders(),
        signal: controller.signal,
      });
      if (response.status === 401 || response.status === 403) {
        return askForToken(tokenProblem(response));
      }
      if (!response.ok) throw new Error(`HTTP ${response.status}`);
      $('connection').textContent = 'live';
      delay = 1000;
      await readEvents(response.body, render);
    } catch (error) {
      if (controller.signal.aborted) return;
      $('connection').textContent = `reconnecting (${error.message})`;
    }
    await new Promise((resolve) => setTimeout(resolve, delay));
  }
}

/** Server-sent events from a fetch body: `data:` lines up to a blank line make one event. */
async function readEvents(body, onEvent) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) throw new Error('stream ended');
    buffer += value;
    let end;
    while ((end = buffer.indexOf('\n\n')) >= 0) {
      const event = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      const data = event
        .split('\n')
        .filter((line) => line.startsWith('data:'))
        .map((line) => line.slice(5).trimStart())
        .join('\n');
      if (data) onEvent(JSON.parse(data));
    }
  }
}

const number = (n) => Math.round(n).toLocaleString('en');

/** The last snapshot's view and clock, so the sale countdown ticks between snapshots. */
let sale = null;

/** `1:02:03` or `2:03`: whole seconds, rounded up as the service's Retry-After is. */
function duration(ms) {
  const total = Math.ceil(ms / 1000);
  const [h, m, s] = [Math.floor(total / 3600), Math.floor(total / 60) % 60, total % 60];
  return h > 0
    ? `${h}:${String(m).padStart(2, '0')}:${String(s).padStart(2, '0')}`
    : `${m}:${String(s).padStart(2, '0')}`;
}

function renderSaleWindow() {
  const line = $('sale-window');
  if (!sale) return (line.textContent = '');
  const { view, atMs, receivedAt } = sale;
  // The service's clock at the snapshot, moved on by how long ago it arrived: the browser's own clock may be off.
  const now = atMs + (performance.now() - receivedAt);
  const opens = view.saleStartsAt && Date.parse(view.saleStartsAt);
  const closes = view.saleEndsAt && Date.parse(view.saleEndsAt);
  const time = (ms) => new Date(ms).toLocaleString();
  let text;
  if (opens && now < opens) text = `opens ${time(opens)}, in ${duration(opens - now)}`;
  else if (closes && now >= closes) text = `sale closed ${time(closes)}`;
  else if (closes) text = `on sale, closes ${time(closes)}, in ${duration(closes - now)}`;
  else text = opens ? `on sale since ${time(opens)}` : 'on sale';
  line.textContent = text;
  line.dataset.onSale = String(!(opens && now < opens) && !(closes && now >= closes));
}
setInterval(renderSaleWindow, 250);

function render(snapshot) {
  $('instance').textContent = snapshot.instance;
  $('at').textContent = new Date(snapshot.at).toLocaleTimeString();
  $('problem').textContent = snapshot.problem ? `(${snapshot.problem})` : '';
  $('orders-per-second').textContent = snapshot.ordersPerSecond.toFixed(1);
  $('lock-waits-per-second').textContent = snapshot.lockWaitsPerSecond.toFixed(1);
  $('lock-waits').textContent = number(snapshot.lockWaits);
  const rows = Object.entries(snapshot.answersByStatus).map(([status, count]) => {
    const row = document.createElement('tr');
    row.dataset.status = status;
    for (const text of [status, number(count)]) row.insertCell().textContent = text;
    return row;
  });
  $('answers').tBodies[0].replaceChildren(...rows);
  const events = (snapshot.recentEvents ?? []).map((event) => {
    const row = document.createElement('tr');
    row.dataset.type = event.type;
    const { available, reserved, sold } = event.data;
    const cells = [
      new Date(event.occurredAt).toLocaleTimeString(),
      event.sequence,
      event.type,
      available,
      reserved,
      sold,
    ];
    for (const text of cells) row.insertCell().textContent = typeof text === 'number' ? number(text) : text;
    return row;
  });
  $('events').tBodies[0].replaceChildren(...events);
  const view = snapshot.view;
  if (!view) return;
  sale = { view, atMs: Date.parse(snapshot.at), receivedAt: performance.now() };
  renderSaleWindow();
  $('stock').textContent = number(view.stock);
  $('available').textContent = number(view.available);
  $('sold').textContent = number(view.sold);
  $('reserved').textContent = number(view.reserved ?? 0);
  const largest = Math.max(1, ...view.segmentStock.map((s) => s.available));
  const bars = view.segmentStock.map(({ segment, available }) => {
    const row = document.createElement('div');
    row.className = 'segment';
    row.dataset.segment = String(segment);
    const label = document.createElement('span');
    label.textContent = `#${segment}`;
    const track = document.createElement('div');
    track.className = 'track';
    const bar = document.createElement('div');
    bar.className = 'bar';
    // Set through the CSSOM: the page's policy allows no inline style attributes.
    bar.style.width = `${(100 * available) / largest}%`;
    track.append(bar);
    const value = document.createElement('span');
    value.className = 'value';
    value.textContent = number(available);
    row.append(label, track, value);
    return row;
  });
  $('segments').replaceChildren(...bars);
}

function start() {
  takeTokenFromFragment();
  const sku = new URLSearchParams(location.search).get('sku') ?? '';
  $('sku-list').addEventListener('change', (event) => {
    const chosen = event.target.value;
    history.replaceState(null, '', chosen ? `?sku=${encodeURIComponent(chosen)}` : location.pathname);
    void watch(chosen);
  });
  $('token-form').addEventListener('submit', (event) => {
    event.preventDefault();
    sessionStorage.setItem(TOKEN_KEY, $('token-input').value.trim());
    $('token-form').hidden = true;
    const chosen = $('sku-list').value || sku;
    void loadSkuList(chosen);
    void watch(chosen);
  });
  void loadSkuList(sku);
  if (!sku) $('connection').textContent = 'choose a SKU';
  void watch(sku);
}

start();

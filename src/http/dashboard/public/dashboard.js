// The dashboard: the last hour of the fleet's series for the chosen SKU, then one event stream per page whose
// snapshots carry the newest seconds. EventSource cannot send an Authorization header, so the stream is read with
// fetch(); the token comes from the URL fragment (#token=…, never sent to the server nor kept in history) or from
// the form, and lives in sessionStorage for this tab only.
import { Chart, REASONS, SeriesStore } from './charts.js';
import { number, renderBooks, renderLine, renderSegments, renderTimeline } from './stock-panel.js';

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
const store = new SeriesStore();
let timeline = [];
let charts = [];

const SERIES_COLOURS = {
  placed: '#1b7f3b',
  out_of_stock: '#b3261e',
  not_on_sale: '#b45309',
  purchase_limit: '#6b4fbb',
  lock_busy: '#0b7285',
};

function makeCharts() {
  const events = () => timeline;
  const refusals = (scope) =>
    REASONS.map((reason) => [`${scope}.refusals.${reason}`, `${reason} (${scope})`, SERIES_COLOURS[reason]]);
  charts = [
    new Chart(
      $('chart-orders'),
      store,
      // The fleet's first, so that this SKU's lines are drawn over it where they coincide.
      [
        ['fleet.placed', 'placed (fleet)', '#9aa3b2'],
        ['sku.placed', 'placed (this SKU)', SERIES_COLOURS.placed],
        ...refusals('sku'),
      ],
      events,
    ),
    new Chart(
      $('chart-stock'),
      store,
      [
        ['sku.available', 'available', '#3a7bd5'],
        ['sku.reserved', 'reserved', '#b45309'],
        ['sku.sold', 'sold', '#1b7f3b'],
      ],
      events,
      { units: 'units' },
    ),
    new Chart(
      $('chart-latency'),
      store,
      [
        ['fleet.p50Ms', 'p50 (fleet)', '#9ec1f0'],
        ['fleet.p99Ms', 'p99 (fleet)', '#f0a39e'],
        ['sku.p50Ms', 'p50 (this SKU)', '#3a7bd5'],
        ['sku.p99Ms', 'p99 (this SKU)', '#b3261e'],
      ],
      events,
      { units: 'ms' },
    ),
    new Chart(
      $('chart-fleet'),
      store,
      [
        ['fleet.placed', 'placed', SERIES_COLOURS.placed],
        ...refusals('fleet'),
        ['fleet.lockWaits', 'lock waits', '#5b6475'],
        ['fleet.events', 'events', '#6b4fbb'],
        ['fleet.webhookLagSeconds', 'webhook lag (s)', '#e8590c', 'lag'],
      ],
      events,
      { secondScale: { name: 'lag', label: 'lag, s' } },
    ),
  ];
}

/** The last hour, loaded once per SKU: from then on the snapshots' recent seconds are merged in. */
async function loadHistory(sku, signal) {
  const response = await fetch(`/dashboard/history?sku=${encodeURIComponent(sku)}`, { headers: authHeaders(), signal });
  if (!response.ok) throw Object.assign(new Error(`HTTP ${response.status}`), { response });
  const history = await response.json();
  store.reset(history.series);
  timeline = history.timeline;
  renderSeries();
}

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
  // Once the page is laid out, so that the charts take its width.
  if (charts.length === 0) makeCharts();
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
      // After the stream is open, so that no second falls between the history and the first snapshot.
      await loadHistory(sku, controller.signal);
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

const rate = (value) => (value === null ? '–' : value.toLocaleString('en', { maximumFractionDigits: 1 }));

/** The newest second every instance has surely added to: each flushes once a second. */
const SETTLED = 1;

function renderSeries() {
  for (const chart of charts) chart.update();
  const refusedAt = (scope) =>
    REASONS.reduce((sum, reason) => sum + (store.at(`${scope}.refusals.${reason}`, SETTLED) ?? 0), 0);
  $('orders-per-second').textContent =
    `${rate(store.at('sku.placed', SETTLED))}, ${rate(store.at('fleet.placed', SETTLED))}`;
  $('refusals-per-second').textContent = `${rate(refusedAt('sku'))}, ${rate(refusedAt('fleet'))}`;
  const p50 = store.at('sku.p50Ms', SETTLED);
  const p99 = store.at('sku.p99Ms', SETTLED);
  $('answer-time').textContent = p50 === null ? '–' : `${p50.toFixed(1)} / ${p99.toFixed(1)}`;
  const rows = ['placed', ...REASONS].map((reason) => {
    const key = reason === 'placed' ? 'sku.placed' : `sku.refusals.${reason}`;
    const row = document.createElement('tr');
    row.dataset.reason = reason;
    row.dataset.total = String(store.total(key));
    for (const text of [reason.replace('_', ' '), number(store.total(key))]) row.insertCell().textContent = text;
    return row;
  });
  $('refusals').tBodies[0].replaceChildren(...rows);
}

function renderInstances(instances) {
  const items = instances.map(({ instance, ready, alive }) => {
    const item = document.createElement('li');
    item.dataset.state = alive ? (ready ? 'ready' : 'not-ready') : 'gone';
    item.textContent = `${instance}: ${alive ? (ready ? 'ready' : 'not ready') : 'gone'}`;
    return item;
  });
  $('instances').replaceChildren(...items);
}

function render(snapshot) {
  $('instance').textContent = snapshot.instance;
  $('at').textContent = new Date(snapshot.at).toLocaleTimeString();
  $('problem').textContent = snapshot.problem ? `(${snapshot.problem})` : '';
  renderInstances(snapshot.instances);
  timeline = snapshot.timeline ?? [];
  if (snapshot.recent) store.merge(snapshot.recent);
  renderSeries();
  renderTimeline($('events'), timeline);
  renderBooks($('audit'), snapshot.books);
  renderLine($('line'), snapshot.line);
  const view = snapshot.view;
  if (!view) return;
  sale = { view, atMs: Date.parse(snapshot.at), receivedAt: performance.now() };
  renderSaleWindow();
  $('stock').textContent = number(view.stock);
  $('available').textContent = number(view.available);
  $('sold').textContent = number(view.sold);
  $('reserved').textContent = number(view.reserved ?? 0);
  renderSegments($('segments'), view);
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

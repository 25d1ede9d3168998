// The SKU's stock as the page lays it out beside the charts: its segments as bars, its timeline as a table, the
// line that says whether the books balance, and its waiting line's figures when it is sold through one. Each takes what a snapshot carries and replaces its element's content.

export const number = (n) => Math.round(n).toLocaleString('en');

/** Each bar against the segment's share of the stock, so half the stock left shows as half-full bars. */
export function renderSegments(element, view) {
  const share = Math.max(1, view.stock / Math.max(1, view.segments));
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
    bar.style.width = `${Math.min(100, (100 * available) / share)}%`;
    track.append(bar);
    const value = document.createElement('span');
    value.className = 'value';
    value.textContent = number(available);
    row.append(label, track, value);
    return row;
  });
  element.replaceChildren(...bars);
}

/** The SKU's notable events, newest first, with the stock each left behind. */
export function renderTimeline(table, timeline) {
  const rows = timeline.map((event) => {
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
  table.tBodies[0].replaceChildren(...rows);
}

/**
 * "books balanced, checked 3 s ago", or the SKUs the audit found off (GET /audit says what is off). Hidden until the
 * audit has something to say; the age is the service's own arithmetic, so the browser's clock does not enter it.
 */
export function renderBooks(line, books) {
  if (!books || (books.balanced === null && books.unbalancedCount === 0)) {
    line.hidden = true;
    return;
  }
  const checked = books.checkedSecondsAgo === null ? '' : `, checked ${books.checkedSecondsAgo} s ago`;
  line.dataset.state = books.balanced ? 'balanced' : 'unbalanced';
  line.textContent = books.balanced
    ? `books balanced${checked}`
    : `books off for ${books.unbalancedCount} SKU(s): ${books.unbalanced.join(', ')}` +
      `${books.unbalancedCount > books.unbalanced.length ? ', …' : ''}${checked}`;
  line.hidden = false;
}

const LINE_STATES = { forming: 'forming', open: 'open', sold_out: 'sold out', closed: 'closed' };

/**
 * The SKU's waiting line (GET /skus/:sku/line): forming (joins make the pre-line), open (admitting in line order),
 * sold out or closed; its tickets, those waiting, the last place let through, and when it sold out. Hidden for a SKU
 * sold without a line.
 */
export function renderLine(section, line) {
  section.hidden = !line;
  if (!line) return;
  section.dataset.state = line.status;
  const set = (id, text) => (section.querySelector(`#${id}`).textContent = text);
  set('line-state', LINE_STATES[line.status] ?? line.status);
  set('line-tickets', number(line.tickets));
  set('line-waiting', number(line.waiting));
  set('line-admitted', number(line.admittedThrough));
  set('line-sold-out', line.soldOutAt ? new Date(line.soldOutAt).toLocaleTimeString() : '–');
}

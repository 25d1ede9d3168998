// The yardstick: what a user would write instead of the service, at its strongest. express + pg, one conditional UPDATE
// per order, no lock, no segments, no fencing; its order statement prepared (a named pg statement: parsed and planned
// once per connection, not on every order), bodies limited as the service limits them. Env: DATABASE_URL, PORT,
// PG_POOL_SIZE (default 20, as the service's). Its tables start empty: a SKU's books count its orders by reading them all, which on a database kept between runs (DATABASE_URL)
// would cost every check the history of every run before.
import express from 'express';
import pg from 'pg';

const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL, max: Number(process.env.PG_POOL_SIZE ?? 20) });
await pool.query(`
  create table if not exists alternative_stock (sku text primary key, stock bigint not null, available bigint not null);
  create table if not exists alternative_orders (
    id bigserial primary key, sku text not null, quantity int not null, created_at timestamptz not null default now());
  truncate alternative_stock, alternative_orders;`);

const PLACE_ORDER = {
  name: 'place-order',
  text: `with deducted as (
      update alternative_stock set available = available - $2 where sku = $1 and available >= $2 returning sku)
    insert into alternative_orders (sku, quantity) select sku, $2 from deducted returning id, created_at`,
};

let inFlight = 0;
const app = express();
app.use(express.json({ limit: '16kb' }));

app.post('/orders', async (req, res) => {
  const { sku, quantity } = req.body as { sku?: unknown; quantity?: unknown };
  if (typeof sku !== 'string' || !Number.isInteger(quantity) || (quantity as number) < 1)
    return void res.status(400).json({ error: 'sku (string) and quantity (positive integer) are required' });
  inFlight++;
  try {
    const { rows } = await pool.query({ ...PLACE_ORDER, values: [sku, quantity] });
    if (rows.length === 0) res.status(409).json({ error: 'out of stock' });
    else res.status(201).json({ orderId: rows[0].id, sku, quantity, createdAt: rows[0].created_at });
  } catch {
    res.status(503).json({ error: 'database unavailable' });
  } finally {
    inFlight--;
  }
});

// What the benchmark needs around the order path: create a SKU, read its books, readiness, requests in flight.
app.post('/skus', async (req, res) => {
  const { sku, stock } = req.body as { sku: string; stock: number };
  await pool.query('insert into alternative_stock (sku, stock, available) values ($1, $2, $2)', [sku, stock]);
  res.status(201).json(await skuView(sku));
});
app.get('/skus/:sku', async (req, res) => void res.json(await skuView(req.params.sku)));
app.get('/readyz', (_req, res) => void res.send('ready'));
app.get('/metrics', (_req, res) => void res.type('text/plain').send(`stock_orders_in_progress ${inFlight}\n`));

/** The SKU's books: units sold are counted from the orders, so a lost insert or a double deduction shows. */
async function skuView(sku: string) {
  const { rows } = await pool.query<{ stock: number; available: number; sold: number }>(
    `select s.stock::float8, s.available::float8,
       (select coalesce(sum(quantity), 0) from alternative_orders o where o.sku = s.sku)::float8 as sold
       from alternative_stock s where s.sku = $1`,
    [sku],
  );
  const { stock, available, sold } = rows[0]!;
  return { sku, segments: 1, stock, available, sold, segmentStock: [{ segment: 0, available }] };
}

app.listen(Number(process.env.PORT), '127.0.0.1');

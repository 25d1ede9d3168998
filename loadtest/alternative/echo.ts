/**
 * The limit of any express order service on this machine: a bare express app that parses the JSON body of
 * `POST /orders` and answers 201 with it. No validation, no database, no middleware beyond the JSON parser. The load
 * test's headline table states every order case as a fraction of it.
 *
 * Env: PORT.
 */
import express from 'express';

const app = express();
app.use(express.json());
app.post('/orders', (req, res) => {
  res.status(201).json(req.body);
});
// What the runner needs around it: readiness, and nothing in flight between rounds.
app.get('/readyz', (_req, res) => {
  res.send('ready');
});
app.get('/metrics', (_req, res) => {
  res.type('text/plain').send('stock_orders_in_progress 0\n');
});
app.listen(Number(process.env.PORT), '127.0.0.1');

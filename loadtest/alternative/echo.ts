// The limit of any express order service here: a bare express app answering POST /orders with its JSON body. Env: PORT.
import express from 'express';

const app = express();
app.use(express.json());
app.post('/orders', (req, res) => void res.status(201).json(req.body));
// What the runner needs around it: readiness, and nothing in flight between rounds.
app.get('/readyz', (_req, res) => void res.send('ready'));
app.get('/metrics', (_req, res) => void res.type('text/plain').send('stock_orders_in_progress 0\n'));
app.listen(Number(process.env.PORT), '127.0.0.1');

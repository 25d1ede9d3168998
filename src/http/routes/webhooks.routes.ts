import { type RequestHandler, Router } from 'express';
import type { Db } from '../../db/database.js';
import type { DestinationGuard } from '../../events/webhook-destinations.js';
import { AppError } from '../../errors.js';
import { jsonBody } from '../json-body.js';
import { methodNotAllowed } from '../method-not-allowed.js';
import { parseOr400 } from '../validate.js';
import {
  createWebhookBody,
  deliveriesQuery,
  replayWebhookBody,
  updateWebhookBody,
  webhookId,
} from '../event-schemas.js';
import {
  deleteWebhook,
  findWebhook,
  insertWebhook,
  listDeliveries,
  listWebhooks,
  replayFrom,
  updateWebhook,
  viewOf,
  type WebhookRow,
} from '../../events/webhook.repository.js';

/**
 * Registering and managing webhook endpoints, under `/webhooks` (`webhooks:manage`). The signing secret is shown
 * once, at creation.
 */
export function webhookRoutes(db: Db, destinations: DestinationGuard, requireManage: RequestHandler): Router {
  const router = Router();
  /** 422 for a URL whose host is, or resolves to, an address webhooks may not reach (see webhook-destinations.ts). */
  const reachable = async (url: string | undefined): Promise<void> => {
    const refused = url === undefined ? undefined : await destinations.refusalOf(url);
    if (!refused) return;
    const detail = `url: ${refused.message}; webhooks are sent to public addresses only`;
    throw new AppError('webhook_destination_refused', detail, { rule: refused.rule });
  };
  const found = (id: string, row: WebhookRow | undefined): WebhookRow => {
    if (!row) throw new AppError('webhook_not_found', `webhook '${id}' does not exist`);
    return row;
  };
  const idOf = (raw: string | undefined) => parseOr400(webhookId, raw, 'id');

  router
    .route('/')
    .post(requireManage, jsonBody, async (req, res) => {
      const body = parseOr400(createWebhookBody, req.body, 'body');
      await reachable(body.url);
      const row = await insertWebhook(db, body);
      res.location(`/webhooks/${row.id}`);
      res.status(201).json({ ...viewOf(row), secret: row.secret });
    })
    .get(requireManage, async (_req, res) => {
      res.json({ webhooks: (await listWebhooks(db)).map(viewOf) });
    })
    .all(methodNotAllowed('GET', 'POST'));

  router
    .route('/:id')
    .get(requireManage, async (req, res) => {
      const id = idOf(req.params.id);
      res.json(viewOf(found(id, await findWebhook(db, id))));
    })
    .patch(requireManage, jsonBody, async (req, res) => {
      const id = idOf(req.params.id);
      const changes = parseOr400(updateWebhookBody, req.body, 'body');
      await reachable(changes.url);
      res.json(viewOf(found(id, await updateWebhook(db, id, changes))));
    })
    .delete(requireManage, async (req, res) => {
      const id = idOf(req.params.id);
      if (!(await deleteWebhook(db, id))) found(id, undefined);
      res.status(204).end();
    })
    .all(methodNotAllowed('GET', 'PATCH', 'DELETE'));

  router
    .route('/:id/deliveries')
    .get(requireManage, async (req, res) => {
      const id = idOf(req.params.id);
      const { limit } = parseOr400(deliveriesQuery, req.query, 'query');
      found(id, await findWebhook(db, id));
      const deliveries = (await listDeliveries(db, id, limit)).map((d) => ({
        eventId: String(d.event_id),
        attempt: d.attempt,
        outcome: d.outcome,
        responseStatus: d.response_status,
        error: d.error,
        attemptedAt: d.attempted_at.toISOString(),
      }));
      res.json({ deliveries });
    })
    .all(methodNotAllowed('GET'));

  router
    .route('/:id/replay')
    .post(requireManage, jsonBody, async (req, res) => {
      const id = idOf(req.params.id);
      const { after } = parseOr400(replayWebhookBody, req.body, 'body');
      res.json(viewOf(found(id, await replayFrom(db, id, Number(after)))));
    })
    .all(methodNotAllowed('POST'));

  return router;
}

import { describe, expect, it } from 'vitest';
import type { LineRow, TicketRow, TicketState } from '../../src/lines/line.repository.js';
import { lineView, ticketView } from '../../src/lines/ticket-view.js';

const NOW = Date.parse('2026-12-01T12:00:00Z');

const line = (fields: Partial<LineRow> = {}): LineRow => ({
  skuId: 1,
  sku: 'drop',
  capacity: 100,
  holdSeconds: 120,
  tickets: 10,
  finalTickets: 0,
  preLineTickets: 4,
  drawnAt: new Date(NOW - 60_000),
  drawSeed: 'ab',
  numbersGiven: 10,
  unitsGiven: 15,
  admittedThrough: 3,
  unitsAdmitted: 5,
  soldOutAt: null,
  saleStartsAt: NOW - 60_000,
  saleEndsAt: null,
  ...fields,
});

const ticket = (fields: Partial<TicketRow> = {}): TicketRow => ({
  id: '00000000-0000-7000-8000-000000000001',
  skuId: 1,
  customerId: 'ann',
  quantity: 2,
  preLine: false,
  number: 7,
  unitsBefore: 11,
  status: 'waiting',
  orderId: null,
  refusal: null,
  joinedAt: new Date(NOW - 30_000),
  admittedAt: null,
  ...fields,
});

const view = (state: Partial<TicketState>) =>
  ticketView({ ticket: ticket(), line: line(), order: null, ...state }, NOW);

describe('what a ticket holder is told', () => {
  it('a waiting ticket: its place, the tickets and units in front of it still waiting', () => {
    expect(view({})).toMatchObject({ status: 'waiting', position: 7, ahead: 3, unitsAhead: 6, reservation: null });
  });

  it('a ticket at the head has nobody ahead; one let through and not yet reserved still waits, first', () => {
    expect(view({ ticket: ticket({ number: 4, unitsBefore: 5 }) })).toMatchObject({ ahead: 0, unitsAhead: 0 });
    expect(view({ ticket: ticket({ number: 3, unitsBefore: 3, status: 'admitting' }) })).toMatchObject({
      status: 'waiting',
      ahead: 0,
      unitsAhead: 0,
    });
  });

  it('a pre-line ticket before the draw has no place yet', () => {
    const undrawn = line({ drawnAt: null, drawSeed: null, numbersGiven: 0 });
    expect(view({ ticket: ticket({ preLine: true, number: null, unitsBefore: null }), line: undrawn })).toMatchObject({
      status: 'waiting',
      preLine: true,
      position: null,
      ahead: null,
      unitsAhead: null,
    });
  });

  it('an admitted ticket reads as its reservation: admitted, purchased, expired (also once due), cancelled', () => {
    const admitted = ticket({ status: 'admitted', orderId: '00000000-0000-7000-8000-0000000000aa' });
    const expiresAt = new Date(NOW + 60_000);
    const of = (status: 'reserved' | 'confirmed' | 'cancelled' | 'expired', due = false) =>
      view({ ticket: admitted, order: { status, expiresAt, due } });
    expect(of('reserved')).toMatchObject({
      status: 'admitted',
      ahead: null,
      reservation: { orderId: admitted.orderId, expiresAt: expiresAt.toISOString() },
    });
    expect(of('reserved', true).status).toBe('expired');
    expect(of('confirmed').status).toBe('purchased');
    expect(of('cancelled').status).toBe('cancelled');
    expect(of('expired').status).toBe('expired');
  });

  it('a waiting ticket of a sold-out line reads sold out; of a line past its window, closed', () => {
    expect(view({ line: line({ soldOutAt: new Date(NOW - 1) }) }).status).toBe('sold_out');
    expect(view({ line: line({ saleEndsAt: NOW }) }).status).toBe('closed');
    expect(view({ line: line({ saleEndsAt: NOW + 1 }) }).status).toBe('waiting');
  });

  it('a ticket passed for asking more than could come back reads sold out; another refusal says why', () => {
    expect(view({ ticket: ticket({ status: 'refused', refusal: 'out_of_stock' }) })).toMatchObject({
      status: 'sold_out',
      refusal: null,
    });
    expect(view({ ticket: ticket({ status: 'refused', refusal: 'purchase_limit' }) })).toMatchObject({
      status: 'refused',
      refusal: 'purchase_limit',
    });
  });
});

describe('what a line reader is told', () => {
  it('forming before the draw, with the pre-line waiting; open after it, with what is not let through waiting', () => {
    expect(lineView(line({ drawnAt: null, drawSeed: null }), NOW)).toMatchObject({
      status: 'forming',
      waiting: 4,
      draw: { preLineTickets: 4, drawnAt: null, seed: null },
    });
    expect(lineView(line(), NOW)).toMatchObject({ status: 'open', waiting: 7, admittedThrough: 3 });
  });

  it('sold out before closed, closed once the window ends', () => {
    expect(lineView(line({ soldOutAt: new Date(NOW), saleEndsAt: NOW }), NOW).status).toBe('sold_out');
    expect(lineView(line({ saleEndsAt: NOW }), NOW).status).toBe('closed');
  });
});

import { z } from 'zod';

/** Request shapes. Objects are strict: an unknown field is an error, not something silently ignored. */

export const skuName = z
  .string()
  .min(1)
  .max(64)
  .regex(/^[A-Za-z0-9._:-]+$/, 'only letters, digits and . _ : - are allowed');

const stockQuantity = z.number().int().min(0).max(1e12);

export const createSkuBody = z.strictObject({
  sku: skuName,
  stock: stockQuantity,
  segments: z.number().int().min(1).max(1024),
});

export const resegmentBody = z.strictObject({
  segments: z.number().int().min(1).max(1024),
});

export const restockBody = z.strictObject({
  quantity: z.number().int().min(1).max(1e12),
});

export const orderBody = (maxQuantity: number) =>
  z.strictObject({
    sku: skuName,
    quantity: z.number().int().min(1).max(maxQuantity),
  });

/** 1–128 visible ASCII characters. */
export const idempotencyKey = z.string().regex(/^[\x21-\x7e]{1,128}$/, 'must be 1–128 visible ASCII characters');

export const orderId = z.uuid();

/** What a stored SKU name is made of: 1–64 of these characters (the request schema refuses `.` and `..` besides). */
export const SKU_NAME_PATTERN = /^[A-Za-z0-9._:-]+$/;
export const SKU_NAME_MAX_LENGTH = 64;

/** Whether `text` could be a stored SKU's name. */
export const isStoredSkuName = (text: string) => text.length <= SKU_NAME_MAX_LENGTH && SKU_NAME_PATTERN.test(text);

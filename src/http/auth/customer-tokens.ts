import { createRemoteJWKSet, errors, jwtVerify, type JWTVerifyOptions } from 'jose';
import type { CustomerTokens } from '../../config.js';
import { AppError } from '../../errors.js';
import { customerId } from '../schemas.js';

/** Asymmetric algorithms a JWKS key may sign with; HMAC never, so a public key cannot be used as an HMAC secret. */
const JWKS_ALGORITHMS = ['RS256', 'RS384', 'RS512', 'PS256', 'PS384', 'PS512', 'ES256', 'ES384', 'ES512', 'EdDSA'];
/** Clocks of the issuer and the service may differ this much (seconds) for `exp` and `nbf`. */
const CLOCK_TOLERANCE_S = 30;
/** A verified token is taken again without verifying for this long at most (never past its `exp`)… */
const VERIFIED_FOR_MS = 60_000;
/** …and this many verified tokens are remembered, the oldest forgotten first. */
const VERIFIED_MAX = 10_000;

/**
 * Verifies customer JWTs with jose: the signature (keys of the issuer's JWKS, fetched once and cached, or the shared
 * HS256 secret), the allowed algorithms (`alg: none` never), `exp` (required) and `nbf`, the issuer and the audience.
 * A token is valid for at most `maxLifetimeSeconds` (CUSTOMER_TOKEN_MAX_LIFETIME_SECONDS): its `exp` may lie at most
 * that long after its `iat`, an `iat` may not lie in the future, and a token without `iat` may not expire later than
 * that long from now; so a token leaked with a distant `exp` is refused, not honoured for years.
 * A token that passes acts for the customer in its `sub`. A browser sends the same token with every request, so a
 * verified token is remembered (exactly that string, up to a minute and never past its `exp`): an RSA signature check
 * per order would cost more than the rest of the request's authentication.
 */
export class CustomerTokenVerifier {
  private readonly verify: (token: string) => ReturnType<typeof jwtVerify>;
  private readonly verified = new Map<string, { customerId: string; until: number }>();
  private readonly maxLifetimeSeconds: number;

  constructor(config: CustomerTokens) {
    this.maxLifetimeSeconds = config.maxLifetimeSeconds;
    const options: JWTVerifyOptions = {
      issuer: config.issuer,
      audience: config.audience,
      requiredClaims: ['exp', 'sub'],
      clockTolerance: CLOCK_TOLERANCE_S,
    };
    if (config.jwksUrl !== undefined) {
      // jose caches the key set (10 minutes), and fetches it again at most every 30 s for an unknown `kid`.
      const keys = createRemoteJWKSet(new URL(config.jwksUrl));
      this.verify = (token) => jwtVerify(token, keys, { ...options, algorithms: JWKS_ALGORITHMS });
    } else {
      const secret = new TextEncoder().encode(config.secret);
      this.verify = (token) => jwtVerify(token, secret, { ...options, algorithms: ['HS256'] });
    }
  }

  /** The customer the token acts for; throws invalid_token, or dependency_unavailable when the keys cannot be had. */
  async customerOf(token: string): Promise<string> {
    const known = this.verified.get(token);
    if (known !== undefined) {
      if (known.until > Date.now()) return known.customerId;
      this.verified.delete(token);
    }
    let sub: string | undefined;
    let exp: number | undefined;
    let iat: number | undefined;
    try {
      ({
        payload: { sub, exp, iat },
      } = await this.verify(token));
    } catch (error) {
      if (error instanceof errors.JWKSTimeout || !(error instanceof errors.JOSEError)) {
        throw new AppError('dependency_unavailable', "the customer token issuer's keys could not be fetched", {}, 1);
      }
      throw new AppError('invalid_token', `the bearer token is not valid: ${reason(error)}`);
    }
    const now = Date.now() / 1000;
    if (iat !== undefined && iat > now + CLOCK_TOLERANCE_S) {
      throw new AppError('invalid_token', 'the bearer token is not valid: claim iat rejected (in the future)');
    }
    if (exp! - (iat ?? now) > this.maxLifetimeSeconds + CLOCK_TOLERANCE_S) {
      throw new AppError(
        'invalid_token',
        `the bearer token is not valid: it is valid for longer than ${this.maxLifetimeSeconds} s`,
      );
    }
    if (!customerId.safeParse(sub).success) {
      throw new AppError('invalid_token', 'the bearer token is not valid: its sub is not a customer id');
    }
    this.remember(token, sub!, exp!);
    return sub!;
  }

  private remember(token: string, customerId: string, exp: number): void {
    if (this.verified.size >= VERIFIED_MAX) this.verified.delete(this.verified.keys().next().value!);
    this.verified.set(token, { customerId, until: Math.min(Date.now() + VERIFIED_FOR_MS, exp * 1000) });
  }
}

/** What is wrong with a token, without echoing any of its content. */
function reason(error: InstanceType<typeof errors.JOSEError>): string {
  if (error instanceof errors.JWTExpired) return 'expired';
  if (error instanceof errors.JWTClaimValidationFailed) return `claim ${error.claim} rejected`;
  if (error instanceof errors.JOSEAlgNotAllowed) return 'algorithm not allowed';
  if (error instanceof errors.JWSSignatureVerificationFailed) return 'signature does not verify';
  if (error instanceof errors.JWKSNoMatchingKey) return 'no key of the issuer matches';
  return 'malformed';
}

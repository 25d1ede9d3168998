import { createRemoteJWKSet, errors, jwtVerify, type JWTVerifyOptions } from 'jose';
import type { CustomerTokens } from '../../config.js';
import { AppError } from '../../errors.js';
import { customerId } from '../schemas.js';

/** Asymmetric algorithms a JWKS key may sign with; HMAC never, so a public key cannot be used as an HMAC secret. */
const JWKS_ALGORITHMS = ['RS256', 'RS384', 'RS512', 'PS256', 'PS384', 'PS512', 'ES256', 'ES384', 'ES512', 'EdDSA'];
/** Clocks of the issuer and the service may differ this much (seconds) for `exp` and `nbf`. */
const CLOCK_TOLERANCE_S = 30;

/**
 * Verifies customer JWTs with jose: the signature (keys of the issuer's JWKS, fetched once and cached, or the shared
 * HS256 secret), the allowed algorithms (`alg: none` never), `exp` (required) and `nbf`, the issuer and the audience.
 * A token that passes acts for the customer in its `sub`.
 */
export class CustomerTokenVerifier {
  private readonly verify: (token: string) => ReturnType<typeof jwtVerify>;

  constructor(config: CustomerTokens) {
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
    let sub: string | undefined;
    try {
      ({
        payload: { sub },
      } = await this.verify(token));
    } catch (error) {
      if (error instanceof errors.JWKSTimeout || !(error instanceof errors.JOSEError)) {
        throw new AppError('dependency_unavailable', "the customer token issuer's keys could not be fetched", {}, 1);
      }
      throw new AppError('invalid_token', `the bearer token is not valid: ${reason(error)}`);
    }
    if (!customerId.safeParse(sub).success) {
      throw new AppError('invalid_token', 'the bearer token is not valid: its sub is not a customer id');
    }
    return sub!;
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

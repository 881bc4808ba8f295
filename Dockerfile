# The service's image: the API, the worker and the one-shot commands (bootstrap, migrate, manage) all
# run from it. Node 24 runs the .ts sources directly, so there is no build step; dependencies are
# installed here, inside the image, never into the host's node_modules.
FROM node:24-slim
WORKDIR /app
ENV NODE_ENV=production
COPY package.json package-lock.json ./
# Runtime dependencies only (the `node` devDependency, vitest, TypeScript and the browser are for tests).
RUN npm ci --omit=dev --no-audit --no-fund && npm cache clean --force
COPY api ./api
COPY shared ./shared
COPY worker ./worker
COPY scripts ./scripts
# Access-export archives (ACCESS_EXPORT_DIR): a volume the API and worker share, owned by the app's user.
RUN mkdir -p /app/data/access-exports && chown -R node:node /app/data
USER node
EXPOSE 8000
CMD ["node", "api/main.ts"]

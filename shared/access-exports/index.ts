// The public face of shared/access-exports/: a person's data handed to them (right of access) as one
// signed .tar.gz per request, built by the worker on disk, downloaded, and removed after its time.
export { accessExportFailed, archiveFolder, buildAccessExport, exportArchive } from './build.ts';
export { expireAccessExports } from './expire.ts';
export {
  ACCESS_EXPORT_MAX_IDS,
  NoPersonsFound,
  exportPersons,
  previewAccessExport,
  reconcileAccessExports,
  recordExportDownload,
  requestAccessExport,
  type AccessExportDryRun,
  type AccessRequester,
} from './service.ts';
export {
  ACCESS_EXPORT_STATUSES,
  exportById,
  exportView,
  type AccessExportStatus,
  type AccessExportView,
} from './store.ts';

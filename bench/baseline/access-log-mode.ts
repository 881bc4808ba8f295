// Loaded first (`--import`) by the API processes of bench/access-log.ts: sets how this process records
// reads (BENCH_ACCESS_LOG_MODE: off, unbatched; on by default), to compare the log's cost side by side.
import { type RecordingMode, setAccessRecordingForBench } from '../../shared/access-log/index.ts';

setAccessRecordingForBench((process.env.BENCH_ACCESS_LOG_MODE ?? 'on') as RecordingMode);

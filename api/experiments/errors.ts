// The experiment rules' refusals (shared/experiments/service.ts), answered as PostHog's 400s.
import { ExperimentInputError } from '../../shared/experiments/index.ts';
import { validationError } from '../http/errors.ts';

/** Runs `rules`; an ExperimentInputError becomes the validation error the API answers with. */
export async function applyingRules<T>(rules: () => T | Promise<T>): Promise<T> {
  try {
    return await rules();
  } catch (error) {
    if (error instanceof ExperimentInputError) throw validationError(error.message, error.attr, error.code);
    throw error;
  }
}

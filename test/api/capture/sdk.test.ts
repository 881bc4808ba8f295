// The real posthog-node SDK (gzip on, as it defaults to) against the running API.
import { PostHog } from 'posthog-node';
import { describe, expect, it } from 'vitest';
import { personUuidFor } from '../../../shared/persons/person-uuid.ts';
import { personsOf, sql } from '../../db.ts';
import { apiWithAccount } from '../../helpers.ts';

const { api, account } = await apiWithAccount();

const client = () =>
  new PostHog(account.projectToken, { host: api.baseUrl, flushAt: 1, flushInterval: 0, fetchRetryCount: 0 });

describe('ingestion through posthog-node', () => {
  it('stores captured events, creates persons with $set/$set_once, and upserts event definitions', async () => {
    const posthog = client();
    posthog.capture({
      distinctId: 'user-1',
      event: 'signed up',
      properties: { plan: 'pro', $set: { email: 'ada@example.com' }, $set_once: { first_plan: 'pro' } },
    });
    posthog.capture({
      distinctId: 'user-1',
      event: 'upgraded',
      properties: { $set: { plan: 'enterprise' }, $set_once: { first_plan: 'ignored' } },
    });
    await posthog.shutdown();

    const events = await sql(
      api.orm,
      `select event, distinct_id, person_id, properties from event where project_id = ? order by timestamp`,
      [account.projectId],
    );
    expect(events.map((e) => e.event)).toEqual(['signed up', 'upgraded']);
    expect(events[0].properties.$lib).toBe('posthog-node');
    const [person] = await personsOf(api.orm, account.projectId);
    expect(person.uuid).toBe(personUuidFor(account.projectId, 'user-1'));
    expect(events.every((e) => e.person_id === person.uuid)).toBe(true);
    expect(person.distinct_ids).toEqual(['user-1']);
    expect(person.properties).toMatchObject({ email: 'ada@example.com', first_plan: 'pro', plan: 'enterprise' });
    expect(person.properties.$creator_event_uuid).toBeDefined();
    const definitions = await sql(api.orm, `select name from event_definition where project_id = ? order by name`, [
      account.projectId,
    ]);
    expect(definitions.map((d) => d.name)).toEqual(['signed up', 'upgraded']);
  });

  it('identify sets properties and alias merges the aliased person into the distinct id’s person', async () => {
    const posthog = client();
    posthog.capture({ distinctId: 'anon-7', event: 'viewed page', properties: { $set: { seen: true } } });
    posthog.capture({ distinctId: 'user-7', event: 'logged in' });
    await posthog.flush();
    posthog.identify({ distinctId: 'user-7', properties: { name: 'Grace' } });
    posthog.alias({ distinctId: 'user-7', alias: 'anon-7' });
    await posthog.shutdown();

    const persons = (await personsOf(api.orm, account.projectId)).filter((p) =>
      p.distinct_ids.some((d) => d.endsWith('-7')),
    );
    expect(persons).toHaveLength(1);
    expect(persons[0].distinct_ids).toEqual(['anon-7', 'user-7']);
    expect(persons[0].properties).toMatchObject({ name: 'Grace', seen: true });
    expect(persons[0].is_identified).toBe(true);
    const names = await sql(
      api.orm,
      `select name from event_definition where project_id = ? and name like '$%' order by name`,
      [account.projectId],
    );
    expect(names.map((d) => d.name)).toEqual(['$create_alias', '$identify']);
  });
});

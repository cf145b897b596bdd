/** Cursor walks: every list of the API pages with a keyset cursor (`next_cursor`). */

/** One page of a list: its items and the cursor of the next page (null on the last). */
export interface Page<T> {
  items: T[];
  next_cursor: string | null;
}

/**
 * Every item of a cursor-paged list, fetched page by page as you iterate:
 *
 *     for await (const memory of hub.list({ category: "core" })) { … }
 *     for await (const page of hub.list().pages()) { … }   // page by page
 *     const all = await hub.list().toArray();
 *
 * Nothing is fetched until iteration starts; each iteration walks from the first page again.
 */
export class PageIterator<T> implements AsyncIterable<T> {
  constructor(private readonly fetchPage: (cursor: string | null) => Promise<Page<T>>) {}

  /** The pages, in order; the next one is fetched only when the last one is used up. */
  async *pages(): AsyncGenerator<Page<T>, void, undefined> {
    let cursor: string | null = null;
    do {
      const page: Page<T> = await this.fetchPage(cursor);
      yield page;
      cursor = page.next_cursor;
    } while (cursor);
  }

  async *[Symbol.asyncIterator](): AsyncGenerator<T, void, undefined> {
    for await (const page of this.pages()) yield* page.items;
  }

  /** Every item of every page, in one array. */
  async toArray(): Promise<T[]> {
    const items: T[] = [];
    for await (const item of this) items.push(item);
    return items;
  }
}

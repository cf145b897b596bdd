/** Cursor walks: every list of the API pages with a keyset cursor (`next_cursor`). */

/** One page of a list: its items and the cursor of the next page (null on the last). */
export interface Page<T> {
  items: T[];
  next_cursor: string | null;
}

/** One page of a change feed: its items and the cursor to read after them (never null: also
 * on an empty page, to poll again from). */
export interface FeedPage<T> {
  items: T[];
  next_cursor: string;
}

/** What both walks share: the items of their pages, one page fetched at a time. */
abstract class Walk<T, P extends { items: T[] }> implements AsyncIterable<T> {
  /** The pages, in order; the next one is fetched only when the last one is used up. */
  abstract pages(): AsyncGenerator<P, void, undefined>;

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

/**
 * Every item of a cursor-paged list, fetched page by page as you iterate:
 *
 *     for await (const memory of hub.list({ category: "core" })) { … }
 *     for await (const page of hub.list().pages()) { … }   // page by page
 *     const all = await hub.list().toArray();
 *
 * Nothing is fetched until iteration starts; each iteration walks from the first page again.
 */
export class PageIterator<T> extends Walk<T, Page<T>> {
  constructor(private readonly fetchPage: (cursor: string | null) => Promise<Page<T>>) {
    super();
  }

  async *pages(): AsyncGenerator<Page<T>, void, undefined> {
    let cursor: string | null = null;
    do {
      const page: Page<T> = await this.fetchPage(cursor);
      yield page;
      cursor = page.next_cursor;
    } while (cursor);
  }
}

/**
 * A change feed walked from a cursor to the present, page by page as you iterate:
 *
 *     const feed = hub.events({ after: saved });
 *     for await (const event of feed) apply(event);
 *     saved = feed.cursor;                  // poll again later from here
 *
 * The walk ends at a page shorter than the page size (the feed had nothing more then).
 * `cursor` moves past a page only when the item after its last one is asked for (or the walk
 * ends), so after a `break` or an error in your loop, polling again from `cursor` gives that
 * page again (at least once), never skips it. Nothing is fetched until iteration starts; each
 * iteration walks from `after` again.
 */
export class FeedIterator<T> extends Walk<T, FeedPage<T>> {
  #cursor: string | null;

  constructor(
    private readonly fetchPage: (cursor: string | null) => Promise<FeedPage<T>>,
    private readonly after: string | null,
    private readonly pageSize: number,
  ) {
    super();
    this.#cursor = after;
  }

  /** Where the pages used up so far end (the `after` given, before any). */
  get cursor(): string | null {
    return this.#cursor;
  }

  async *pages(): AsyncGenerator<FeedPage<T>, void, undefined> {
    let cursor = this.after;
    for (;;) {
      const page = await this.fetchPage(cursor);
      yield page;
      this.#cursor = page.next_cursor;
      if (page.items.length < this.pageSize) return;
      cursor = page.next_cursor;
    }
  }
}

//! Spans, batch events and CPU counter groups for ferroloader (filled in by the profiler issue).
//!
//! Knows nothing of images or datasets, and must never lock, allocate per event or do I/O on the
//! hot path.

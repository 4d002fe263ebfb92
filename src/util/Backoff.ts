/**
 * Exponential back-off as a number: the wait before the n-th retry.
 *
 * @since 0.1.0
 */

/** `first` ms after the first failure, doubling with each one after it, never above `max` ms. @since 0.1.0 @category estimators */
export const cappedDoubling = (first: number, max: number, n: number): number => Math.min(max, first * 2 ** Math.max(0, n - 1))

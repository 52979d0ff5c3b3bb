"""Anyone's side of a published result (kind 3189): read it from the relay as wire.md §16.3 reads it, credit
it as §17 credits it, and check its test set against the blob store (`verify`); list a tool's results by
test set with the checks and validations that cite them (`listing`). The rules are `credit`'s, pure; this
package prints nothing (the commands do).
"""

"""``specchat bench``: the seeds' A/B method — same task with and without speculation, alternated and repeated."""

"""A verdict's cause: what an explanation run of each side records (:mod:`.records`), and how two
sides' records become a cause: the step's profile diffed against its own noise (:mod:`.profile`,
drawn by :mod:`.flame`), the tensors that hold the extra bytes (:mod:`.tensors`), where two loss
curves part and how their gradients differ there (:mod:`.gradients`), all said in a few lines
(:mod:`.explanation`). Pure: no torch, no pytest.

Read :mod:`.explanation` first.
"""

-- leasehold schema, version 3: admission by slots (functions.sql's
-- admission). admission_slot_tasks is how many tasks one admission slot
-- admits in the transaction holding it: far from every depth cap a submit
-- holds a slot of its own and waits for no other submit, and within
-- slots × admission_slot_tasks of a cap it takes the exclusive path.
-- Changed only by admission_resize, on the exclusive path.
INSERT INTO settings (key, value) VALUES ('admission_slot_tasks', 64);

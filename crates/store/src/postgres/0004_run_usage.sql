-- What a run used: its token counts and cost as a JSON object
-- (shepherd_core::usage::Usage), kept up to date while it runs.
ALTER TABLE runs ADD COLUMN usage TEXT;

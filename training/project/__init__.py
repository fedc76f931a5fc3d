"""`intent-router init`: a project of one's own intents (router config, training config, a corpus of
three example intents) from the template folder."""

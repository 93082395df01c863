-- Spec §2, Example 2: a network route to one service.
--   AW -> OrderParts         OrderPartsRoute (M2 -> C3): SEND tcp://host2.Adventure-Works.com:4022/
--   AW -> any other service  AutoCreatedLocal (M5 -> C2): DELIVER if a local database hosts it,
--                            else DELAYED
--   from outside             msdb's AutoCreatedLocal: DELIVER, or DROPPED if no local database hosts it
--
-- AW is the docs' AdventureWorks2008R2. SQL Server creates AutoCreatedLocal in every user database
-- and msdb (R8); the router has no implicit routes, so the script creates them.

USE AW;
GO

CREATE ROUTE AutoCreatedLocal WITH ADDRESS = 'LOCAL';

CREATE ROUTE OrderPartsRoute
    WITH SERVICE_NAME = 'OrderParts',
         ADDRESS = 'tcp://host2.Adventure-Works.com:4022/';
GO

USE msdb;
GO

CREATE ROUTE AutoCreatedLocal WITH ADDRESS = 'LOCAL';
GO
